"""verl's further policy losses, each with the call convention of dagrl/algo/catalog.py:
fn(log_prob, old_log_prob, advantages, response_mask, spec) -> (per-token loss, per-token indicator terms).

Each follows its verl 0.9 function in verl/trainer/ppo/core_algos.py (named in its doc). The token-selecting losses
(clip_cov, kl_cov) select among the tokens of the micro-batch they are given, as verl's do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from dagrl.algo.policy_loss import PolicyLossSpec

Terms = dict[str, torch.Tensor]


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def geo_mean_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    spec: PolicyLossSpec,
) -> tuple[torch.Tensor, Terms]:
    """GMPO (compute_policy_loss_geo_mean): each token's log-ratio is clipped to [-low, high] on the side its
    advantage's sign pushes (PPO's pessimistic min, in log space); the sequence's ratio is the exponential of their
    mean, and its loss -mean_t(A) * ratio stands at each of its tokens (a per-sequence loss: the catalog fixes
    seq-mean-token-mean, which averages it over sequences)."""
    mask = response_mask.to(log_prob.dtype)
    log_ratio = log_prob - old_log_prob
    sign = torch.sign(advantages)
    clamped = torch.clamp(log_ratio, -spec.clip_ratio_low, spec.clip_ratio_high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clamped)
    lengths = mask.sum(dim=-1) + 1e-8
    ratio = torch.exp((pessimistic * mask).sum(dim=-1) / lengths)
    advantage = (advantages * mask).sum(dim=-1) / lengths
    loss = (-advantage * ratio).unsqueeze(-1).expand_as(log_prob)
    clipped = log_ratio != clamped
    return loss, {
        "actor/pg_clipfrac": (clipped & (advantages > 0)).float(),
        "actor/pg_clipfrac_lower": (clipped & (advantages < 0)).float(),
        "actor/ppo_kl": -log_ratio,
    }


def clip_cov_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    spec: PolicyLossSpec,
) -> tuple[torch.Tensor, Terms]:
    """Clip-Cov (compute_policy_loss_clip_cov): PPO's clipped loss (no dual clip), except that a random
    max(1, clip_cov_ratio x tokens) of the tokens PPO did not clip whose centred covariance
    (A - mean A)(log_prob - mean log_prob) lies in (clip_cov_lb, clip_cov_ub) lose their gradient (loss 0).
    actor/pg_clipfrac is the fraction so dropped, as verl's."""
    valid = response_mask > 0
    mask = valid.to(log_prob.dtype)
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - spec.clip_ratio_low, 1.0 + spec.clip_ratio_high)
    with torch.no_grad():
        log_p = log_prob.detach()
        cov = (advantages - _masked_mean(advantages, mask)) * (log_p - _masked_mean(log_p, mask))
        candidates = (cov > spec.clip_cov_lb) & (cov < spec.clip_cov_ub) & valid & ~(clipped > unclipped)
        where = torch.nonzero(candidates)
        count = max(int(spec.clip_cov_ratio * valid.sum().item()), 1)
        where = where[torch.randperm(len(where), device=where.device)[:count]]
        keep = torch.ones_like(log_prob)
        keep[where[:, 0], where[:, 1]] = 0.0
    return torch.maximum(unclipped, clipped) * keep, {"actor/pg_clipfrac": 1.0 - keep, "actor/ppo_kl": -log_ratio}


def kl_cov_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    spec: PolicyLossSpec,
) -> tuple[torch.Tensor, Terms]:
    """KL-Cov (compute_policy_loss_kl_cov): the unclipped loss -A * ratio, plus ppo_kl_coef * |log ratio| on the
    max(1, kl_cov_ratio x tokens) tokens of largest covariance (A - mean A)(log_prob - mean log_prob).
    actor/ppo_kl is the mean |log ratio|, as verl's."""
    valid = response_mask > 0
    log_ratio = log_prob - old_log_prob
    penalised = torch.zeros_like(log_prob)
    with torch.no_grad():
        advantage, log_p = advantages[valid], log_prob.detach()[valid]
        if advantage.numel():
            cov = (advantage - advantage.mean()) * (log_p - log_p.mean())
            top = torch.topk(cov, max(1, int(cov.numel() * spec.kl_cov_ratio))).indices
            rows, cols = torch.nonzero(valid, as_tuple=True)
            penalised[rows[top], cols[top]] = 1.0
    loss = -advantages * torch.exp(log_ratio) + spec.ppo_kl_coef * log_ratio.abs() * penalised
    return loss, {"actor/ppo_kl": log_ratio.abs()}


def gpg_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    spec: PolicyLossSpec,
) -> tuple[torch.Tensor, Terms]:
    """GPG (compute_policy_loss_gpg): the plain policy gradient -A * log_prob, no ratio and no clip."""
    return -advantages * log_prob, {"actor/ppo_kl": old_log_prob - log_prob}


def sapo_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    spec: PolicyLossSpec,
) -> tuple[torch.Tensor, Terms]:
    """SAPO (compute_policy_loss_sapo): -A * sigmoid(tau (ratio - 1)) * 4 / tau, tau = tau_pos where A > 0 else
    tau_neg: a soft trust region whose gradient is PPO's at ratio 1 and fades away from it, with no hard clip."""
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    tau = torch.where(
        advantages > 0, torch.full_like(advantages, spec.tau_pos), torch.full_like(advantages, spec.tau_neg)
    )
    gate = torch.sigmoid(tau * (torch.exp(log_ratio) - 1.0)) * (4.0 / tau)
    zeros = torch.zeros_like(log_prob)  # no clip in SAPO
    return -gate * advantages, {
        "actor/pg_clipfrac": zeros,
        "actor/pg_clipfrac_lower": zeros,
        "actor/ppo_kl": -log_ratio,
    }


def _dppo(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    spec: PolicyLossSpec,
    inside_up: torch.Tensor,
    inside_down: torch.Tensor,
) -> tuple[torch.Tensor, Terms]:
    """DPPO's loss: -A * sg[min(ratio, clip_ratio_c)] * log_prob on the tokens whose divergence from pi_old stays
    within the bound on the side the advantage pushes (inside_up for A > 0, inside_down otherwise)."""
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio)
    truncated = torch.clamp(ratio, max=spec.clip_ratio_c).detach()
    inside = torch.where(advantages > 0, inside_up, inside_down).detach().to(log_prob.dtype)
    return -advantages * truncated * log_prob * inside, {
        "actor/pg_clipfrac": 1.0 - inside,
        "actor/pg_clipfrac_lower": (ratio > spec.clip_ratio_c).float() * inside,
        "actor/ppo_kl": -log_ratio,
    }


def dppo_tv_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    spec: PolicyLossSpec,
) -> tuple[torch.Tensor, Terms]:
    """DPPO-TV (compute_policy_loss_dppo_tv): the divergence is p - p_old of the sampled token, bounded by
    clip_ratio_high above and clip_ratio_low below."""
    moved = torch.exp(log_prob) - torch.exp(old_log_prob)
    return _dppo(log_prob, old_log_prob, advantages, spec, moved <= spec.clip_ratio_high, moved >= -spec.clip_ratio_low)


def dppo_kl_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    spec: PolicyLossSpec,
) -> tuple[torch.Tensor, Terms]:
    """DPPO-KL (compute_policy_loss_dppo_kl): the divergence is the binary KL
    p_old log(p_old / p) + (1 - p_old) log((1 - p_old) / (1 - p)), bounded by clip_ratio_high where p rose and
    clip_ratio_low where it fell."""
    prob, old_prob = torch.exp(log_prob), torch.exp(old_log_prob)
    binary_kl = old_prob * (old_log_prob - log_prob) + (1.0 - old_prob) * torch.log(
        (1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8)
    )
    return _dppo(
        log_prob,
        old_log_prob,
        advantages,
        spec,
        (binary_kl <= spec.clip_ratio_high) | (prob <= old_prob),
        (binary_kl <= spec.clip_ratio_low) | (prob >= old_prob),
    )
