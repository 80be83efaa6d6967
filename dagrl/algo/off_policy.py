"""Off-policy correction between the behaviour policy pi_behav that sampled the tokens (the rollout engine's
`rollout_log_probs`: other kernels, bf16, and under partial rollout weights several versions old) and the proximal
policy pi_prox (`old_log_probs`, recomputed by the trainer with the weights the update starts from).

Decoupled PPO (AReaL, Fu et al. 2025; `ppo_actor_loss_fn` in areal/utils/functional.py). The PPO ratio and its
clip are taken against pi_prox, and each token's policy-gradient term is multiplied by the behaviour weight
w_t = pi_prox / pi_behav, which carries no gradient:
    loss_t = w_t * max(-A_t r_t, -A_t clip(r_t, 1 - eps_low, 1 + eps_high)),   r_t = pi_theta / pi_prox
(and vanilla's dual clip for A_t < 0). As in AReaL, a token whose weight exceeds behav_imp_weight_cap is masked
(w_t = 0, not truncated to the cap), yet it stays in the aggregation's denominators: AReaL divides the sum by every
loss-mask token. The weight is on the policy-gradient term only; a token's entropy and KL terms are unchanged.

Sequence masking (verl's rollout correction with rollout_rs=seq_mean_k1). A sequence whose geometric-mean ratio
    rho_i = exp(mean_t(log pi_prox - log pi_behav))   over its response tokens
lies outside [mis_ratio_low, mis_ratio_high] (an unset bound is no bound) is rejected. verl's statistic is the
inverse, k1 = mean_t(log pi_behav - log pi_prox) = -log rho_i, so its rollout_rs_threshold="L_U" is this band with
mis_ratio_low = 1/U, mis_ratio_high = 1/L. As verl's trainer does with its response_mask, the rejection is applied
before the advantage (nodes/advantage.py): a rejected sequence leaves the advantage (its whitening statistics),
the critic's loss and the actor's loss with its entropy and KL terms, and the token-mean denominators; the
seq-mean modes keep it in their sequence count, as verl divides by the nominal ppo_mini_batch_size x rollout.n.
"""

from __future__ import annotations

import torch

OFF_POLICY_MODES = ("none", "decoupled")
MAX_LOG_RATIO = 20.0  # exp(20) ~ 5e8: a far-off token gives no inf (nor inf * 0 = nan) before it is capped


def behav_log_ratio(prox_log_prob: torch.Tensor, behav_log_prob: torch.Tensor) -> torch.Tensor:
    return torch.clamp(prox_log_prob.detach() - behav_log_prob, -MAX_LOG_RATIO, MAX_LOG_RATIO)


def behav_imp_weight(prox_log_prob: torch.Tensor, behav_log_prob: torch.Tensor, cap: float | None) -> torch.Tensor:
    """pi_prox / pi_behav per token, without gradient; 0 where it exceeds `cap` (None: no cap), as in AReaL."""
    weight = behav_log_ratio(prox_log_prob, behav_log_prob).exp()
    return weight if cap is None else torch.where(weight <= cap, weight, torch.zeros_like(weight))


def sequence_ratio(
    prox_log_prob: torch.Tensor, behav_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """[B] geometric mean of pi_prox / pi_behav over each sequence's response tokens (1 for an empty one)."""
    mask = response_mask.to(prox_log_prob.dtype)
    mean = ((prox_log_prob - behav_log_prob) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    return torch.clamp(mean, -MAX_LOG_RATIO, MAX_LOG_RATIO).exp()


def sequence_keep(
    prox_log_prob: torch.Tensor,
    behav_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    low: float | None,
    high: float | None,
) -> torch.Tensor:
    """[B] bool: the sequences whose ratio lies in [low, high] (bounds included, as verl's)."""
    ratio = sequence_ratio(prox_log_prob, behav_log_prob, response_mask)
    keep = torch.ones_like(ratio, dtype=torch.bool)
    if low is not None:
        keep &= ratio >= low
    if high is not None:
        keep &= ratio <= high
    return keep


def off_policy_sums(
    prox_log_prob: torch.Tensor,
    behav_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    keep: torch.Tensor,
    cap: float | None,
) -> torch.Tensor:
    """This shard's float64 [sequences, dropped sequences, loss tokens, capped tokens, uncapped tokens, their weight
    sum, their log-ratio sum], to be summed over the DP ranks before `off_policy_metrics`. Loss tokens are those of
    the kept sequences; uncapped ones are those the decoupled loss weights (AReaL's behave_mask)."""
    mask = response_mask.bool()
    has_tokens = mask.any(-1)
    loss_tokens = mask & keep.unsqueeze(-1)
    log_ratio = behav_log_ratio(prox_log_prob, behav_log_prob)
    weight = log_ratio.exp()  # as the loss computes it, so that the capped tokens are the loss's
    capped = loss_tokens & (weight > cap) if cap is not None else torch.zeros_like(loss_tokens)
    uncapped = loss_tokens & ~capped
    sums = (
        has_tokens.sum(),
        (has_tokens & ~keep).sum(),
        loss_tokens.sum(),
        capped.sum(),
        uncapped.sum(),
        (weight.double() * uncapped).sum(),
        (log_ratio.double() * uncapped).sum(),
    )
    return torch.stack([value.double() for value in sums])


def off_policy_metrics(sums: list[float], decoupled: bool, masking: bool) -> dict[str, float]:
    """The update's off-policy metrics from the global `off_policy_sums` (AReaL's names and denominators for the
    behaviour weight: its mean and KL over the uncapped tokens, the capped share over the loss tokens)."""
    sequences, dropped, tokens, capped, uncapped, weight_sum, log_ratio_sum = sums
    metrics = {}
    if masking:
        metrics["actor/mis_masked_fraction"] = dropped / max(sequences, 1.0)
    if decoupled:
        metrics["actor/behav_imp_weight/mean"] = weight_sum / max(uncapped, 1.0)
        metrics["actor/behav_approx_kl"] = log_ratio_sum / max(uncapped, 1.0)
        metrics["actor/behav_imp_weight_capped_fraction"] = capped / max(tokens, 1.0)
    return metrics
