"""Per-token KL estimators between the actor and the reference (Schulman's k1/k2/k3 and friends)."""
from __future__ import annotations

import torch

# verl's names and the k-names are aliases of the same estimators.
_ALIASES = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}
KL_ESTIMATORS = ("k1", "k2", "k3", "abs", "kl", "mse", "low_var_kl")


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str) -> torch.Tensor:
    """KL(actor || ref) per token, estimated from the log-probs of the sampled tokens."""
    kind = _ALIASES.get(kind, kind)
    diff = log_prob - ref_log_prob
    if kind == "k1":
        return diff
    if kind == "abs":
        return diff.abs()
    if kind == "k2":
        return 0.5 * diff.square()
    if kind == "k3":
        # exp(ref - logp) - (ref - logp) - 1: unbiased, always >= 0; clamped for stability as in the k3 literature
        log_ratio = torch.clamp(-diff, min=-20.0, max=20.0)
        return torch.clamp(log_ratio.exp() - log_ratio - 1.0, min=-10.0, max=10.0)
    raise ValueError(f"unknown KL estimator {kind!r}; valid: {', '.join(KL_ESTIMATORS)}")


class KLController:
    """Fixed or adaptive (Ziegler et al.) coefficient for KL-in-reward."""

    def __init__(self, kind: str, kl_coef: float, target_kl: float, horizon: int) -> None:
        if kind not in ("fixed", "adaptive"):
            raise ValueError(f"algorithm.kl_ctrl.type={kind!r} must be fixed or adaptive")
        self.kind, self.value, self.target, self.horizon = kind, kl_coef, target_kl, horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        if self.kind == "adaptive":
            error = max(min(current_kl / self.target - 1.0, 0.2), -0.2)
            self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"value": float(self.value)}

    def load_state_dict(self, state: dict[str, float]) -> None:
        if self.kind == "adaptive":  # a fixed coefficient is the config's, so a resume may change it
            self.value = state["value"]
