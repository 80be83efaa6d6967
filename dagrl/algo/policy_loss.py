"""The PPO/GRPO actor loss as additive per-token contributions.

Aggregation is done with per-token weights computed over the whole mini-batch before it is split into
micro-batches (`token_weights`), so the sum over micro-batches and DP ranks is exactly the global
aggregate (a true global token mean, not a mean of micro-batch means).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from dagrl.algo.kl import kl_penalty


@dataclass(frozen=True)
class PolicyLossSpec:
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    loss_agg_mode: str = "token-mean"


def token_weights(response_mask: torch.Tensor, loss_agg_mode: str, global_tokens: float) -> torch.Tensor:
    """Per-token weights whose weighted sum over the mini-batch is its aggregate loss."""
    if loss_agg_mode == "token-mean":
        return response_mask.float() / max(global_tokens, 1.0)
    raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}")


def vanilla_policy_loss(log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor,
                        clip_low: float, clip_high: float, clip_c: float
                        ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token clipped PPO loss with dual clip for negative advantages, plus per-token indicator terms."""
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = log_ratio.exp()
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    clip_loss = torch.maximum(unclipped, clipped)
    dual_bound = -advantages * clip_c
    dual_loss = torch.minimum(dual_bound, clip_loss)
    loss = torch.where(advantages < 0, dual_loss, clip_loss)
    terms = {
        "actor/pg_clipfrac": (clipped > unclipped).float(),
        "actor/pg_clipfrac_lower": ((clip_loss > dual_bound) & (advantages < 0)).float(),
        "actor/ppo_kl": -log_ratio,
    }
    return loss, terms


def actor_loss(micro_batch, log_prob: torch.Tensor, entropy: torch.Tensor | None,
               spec: PolicyLossSpec) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The engine's loss_fn: sum of weighted per-token terms of one micro-batch (see module doc)."""
    weights = micro_batch["token_weights"]
    advantages = micro_batch["advantages"]
    old_log_prob = micro_batch["old_log_probs"] if "old_log_probs" in micro_batch else log_prob.detach()
    pg, terms = vanilla_policy_loss(log_prob, old_log_prob, advantages,
                                    spec.clip_ratio_low, spec.clip_ratio_high, spec.clip_ratio_c)
    metrics = {name: (value.detach() * weights).sum() for name, value in terms.items()}
    pg_loss = (pg * weights).sum()
    loss = pg_loss
    metrics["actor/pg_loss"] = pg_loss.detach()
    if entropy is not None:
        entropy_term = (entropy * weights).sum()
        metrics["actor/entropy"] = entropy_term.detach()
        if spec.entropy_coeff:
            loss = loss - spec.entropy_coeff * entropy_term
    if spec.use_kl_loss:
        kl = (kl_penalty(log_prob, micro_batch["ref_log_prob"], spec.kl_loss_type) * weights).sum()
        metrics["actor/kl_loss"] = kl.detach()
        loss = loss + spec.kl_loss_coef * kl
    return loss, metrics
