"""Per-token KL estimators between the actor and the reference (Schulman's k1/k2/k3 and friends), registered with
their names and verl's in dagrl/algo/catalog.py."""

from __future__ import annotations

import torch

from dagrl.algo.catalog import KL_ESTIMATORS


def k1(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    return log_prob - ref_log_prob


def abs_kl(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    return (log_prob - ref_log_prob).abs()


def k2(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    return 0.5 * (log_prob - ref_log_prob).square()


def k3(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """exp(ref - logp) - (ref - logp) - 1: unbiased, always >= 0; clamped for stability as in the k3 literature."""
    log_ratio = torch.clamp(ref_log_prob - log_prob, min=-20.0, max=20.0)
    return torch.clamp(log_ratio.exp() - log_ratio - 1.0, min=-10.0, max=10.0)


def kl_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kind: str) -> torch.Tensor:
    """KL(actor || ref) per token, estimated from the log-probs of the sampled tokens. A straight-through estimator
    (verl's "+" names, `kl_penalty` of core_algos.py) has its own value and k2's gradient, whose expectation is
    the KL's gradient where k1's and k3's are not."""
    try:
        estimator = KL_ESTIMATORS[kind]
    except ValueError as error:
        raise ValueError(f"unknown KL estimator {kind!r}; valid: {', '.join(KL_ESTIMATORS.names())}") from error
    value = estimator(log_prob, ref_log_prob)
    if not estimator.straight_through:
        return value
    gradient = k2(log_prob, ref_log_prob)
    return gradient - gradient.detach() + value.detach()


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
