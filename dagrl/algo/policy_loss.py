"""Policy losses as additive per-token contributions (vanilla PPO, GSPO, CISPO here; the others in
dagrl/algo/policy_variants.py; all registered in dagrl/algo/catalog.py).

Aggregation is done with per-token weights computed over the whole mini-batch before it is split into
micro-batches and DP shards (`token_weights`, from the mini-batch's global token and sequence counts), so the
sum over micro-batches and DP ranks is exactly the global aggregate (a true global token mean or sequence mean,
never a mean of micro-batch means). Every sequence lies whole in one micro-batch, so per-sequence quantities
(GSPO's sequence ratio, a sequence's token count) are computed locally.

Per loss_agg_mode, with m the response mask, T the global token count, S the global count of sequences with
at least one response token, L_i sequence i's token count and L the normalising length:
  token-mean               w_it = m_it / T
  token-sum                w_it = m_it
  seq-mean-token-sum       w_it = m_it / S
  seq-mean-token-mean      w_it = m_it / (L_i * S)
  seq-mean-token-sum-norm  w_it = m_it / (L * S)   (Dr. GRPO; L = loss_scale_factor, default the response length)
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch

from dagrl.algo.catalog import LOSS_AGGREGATIONS, POLICY_LOSSES
from dagrl.algo.kl import kl_penalty
from dagrl.algo.off_policy import OFF_POLICY_MODES, behav_imp_weight


@dataclass(frozen=True)
class PolicyLossSpec:
    """The actor's loss settings. A loss that fixes its aggregation (the catalog's `aggregation`, as verl's SAPO
    and GMPO do) replaces `loss_agg_mode` with it. The fields after behav_imp_weight_cap are the keys the losses
    declare in `uses` (verl's names and defaults), filled by `loss_options`."""

    loss_mode: str = "vanilla"
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    loss_agg_mode: str = "token-mean"
    loss_scale_factor: float | None = None  # L of seq-mean-token-sum-norm; None = the padded response length
    tis_imp_ratio_cap: float = -1.0  # truncated importance sampling on pi_old / pi_rollout; <= 0 = off
    off_policy: str = "none"  # decoupled: AReaL's decoupled PPO (dagrl/algo/off_policy.py)
    behav_imp_weight_cap: float | None = 5.0  # decoupled: tokens with pi_prox / pi_behav above it are masked
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float = 0.1
    tau_pos: float = 1.0
    tau_neg: float = 1.05

    def __post_init__(self) -> None:
        fixed = POLICY_LOSSES.get(self.loss_mode) and POLICY_LOSSES[self.loss_mode].aggregation
        if fixed:
            object.__setattr__(self, "loss_agg_mode", fixed)


def loss_options(actor: Any) -> dict[str, Any]:
    """The PolicyLossSpec fields of the keys the registered losses read (`uses`), from the actor's config."""
    names = {field.name for field in fields(PolicyLossSpec)}
    options = {}
    for key in dict.fromkeys(key for entry in POLICY_LOSSES for key in entry.uses):
        node = actor
        for part in key.split("."):
            node = node[part]
        name = key.rsplit(".", 1)[-1]
        if name not in names:
            raise ValueError(f"policy loss option {key} has no PolicyLossSpec field {name}")
        options[name] = node
    return options


def aggregation_counts(response_mask: torch.Tensor) -> torch.Tensor:
    """This shard's [response tokens, sequences with at least one response token] (float64), to be summed over
    the data-parallel ranks before `token_weights`."""
    lengths = response_mask.sum(dim=-1)
    return torch.stack([lengths.sum(), (lengths > 0).sum()]).double()


def token_mean(mask: torch.Tensor, tokens: float, sequences: float | None, scale: float | None) -> torch.Tensor:
    return mask / max(tokens, 1.0)


def token_sum(mask: torch.Tensor, tokens: float, sequences: float | None, scale: float | None) -> torch.Tensor:
    return mask


def seq_mean_token_sum(mask: torch.Tensor, tokens: float, sequences: float, scale: float | None) -> torch.Tensor:
    return mask / max(sequences, 1.0)


def seq_mean_token_mean(mask: torch.Tensor, tokens: float, sequences: float, scale: float | None) -> torch.Tensor:
    return mask / max(sequences, 1.0) / mask.sum(dim=-1, keepdim=True).clamp(min=1.0)


def seq_mean_token_sum_norm(mask: torch.Tensor, tokens: float, sequences: float, scale: float | None) -> torch.Tensor:
    return mask / max(sequences, 1.0) / float(scale or mask.shape[-1])


def token_weights(
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    global_tokens: float,
    global_sequences: float | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Per-token weights whose weighted sum over the whole mini-batch (all micro-batches, all DP ranks) is its
    aggregate loss (see the module doc)."""
    try:
        aggregation = LOSS_AGGREGATIONS[loss_agg_mode]
    except ValueError as error:
        raise ValueError(
            f"unknown loss_agg_mode {loss_agg_mode!r}; valid: {', '.join(LOSS_AGGREGATIONS.names())}"
        ) from error
    if global_sequences is None and loss_agg_mode.startswith("seq-"):
        raise ValueError(f"loss_agg_mode={loss_agg_mode} needs the mini-batch's global sequence count")
    return aggregation(response_mask.float(), global_tokens, global_sequences, loss_scale_factor)


def vanilla_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    spec: PolicyLossSpec,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token clipped PPO loss with dual clip for negative advantages, plus per-token indicator terms."""
    clip_low, clip_high, clip_c = spec.clip_ratio_low, spec.clip_ratio_high, spec.clip_ratio_c
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


def gspo_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    spec: PolicyLossSpec,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO (Zheng et al. 2025): PPO clipping on the sequence-level ratio
    s_i = exp(mean_t(log_prob - old_log_prob)) over the response tokens of sequence i.

    Per token the ratio is sg[s_i] * pi(y_t) / sg[pi(y_t)]: its value is s_i and its gradient is s_i times the
    token's score function, so with seq-mean-token-mean aggregation (the paper's) a sequence's gradient is s_i
    times the mean of its tokens' score functions, exactly the gradient of the paper's objective."""
    clip_low, clip_high = spec.clip_ratio_low, spec.clip_ratio_high
    mask = response_mask.to(log_prob.dtype)
    log_ratio = log_prob - old_log_prob
    sequence_log_ratio = (log_ratio * mask).sum(dim=-1) / mask.sum(dim=-1).clamp(min=1.0)
    token_log_ratio = log_prob - log_prob.detach() + sequence_log_ratio.detach().unsqueeze(-1)
    ratio = torch.clamp(token_log_ratio, max=10.0).exp()
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    terms = {
        "actor/pg_clipfrac": (clipped > unclipped).float(),
        "actor/pg_clipfrac_lower": torch.zeros_like(log_prob),  # no dual clip in GSPO
        "actor/ppo_kl": -log_ratio,
    }
    return torch.maximum(unclipped, clipped), terms


def cispo_policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    spec: PolicyLossSpec,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO (MiniMax-M1): -sg[clip(ratio, 1 - low, 1 + high)] * A * log_prob. The importance weight is clipped
    and detached, so every token keeps a gradient (no token is dropped by clipping, unlike PPO)."""
    clip_low, clip_high = spec.clip_ratio_low, spec.clip_ratio_high
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = log_ratio.exp()
    weight = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high).detach()
    terms = {
        "actor/pg_clipfrac": (weight != ratio.detach()).float(),
        "actor/pg_clipfrac_lower": torch.zeros_like(log_prob),  # no dual clip in CISPO
        "actor/ppo_kl": -log_ratio,
    }
    return -weight * advantages * log_prob, terms


def policy_loss(
    spec: PolicyLossSpec,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss and indicator terms of `spec.loss_mode`."""
    return POLICY_LOSSES[spec.loss_mode](log_prob, old_log_prob, advantages, response_mask, spec)


def truncated_is_weight(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance sampling: the rollout engine sampled from pi_rollout, not the trainer's pi_old
    (different kernels, bf16); reweight each token by pi_old / pi_rollout, capped at `cap`, without gradient."""
    return torch.exp(old_log_prob.detach() - rollout_log_prob).clamp(max=cap)


def actor_loss(
    micro_batch, log_prob: torch.Tensor, entropy: torch.Tensor | None, spec: PolicyLossSpec
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The engine's loss_fn: sum of weighted per-token terms of one micro-batch (see module doc).

    `token_weights` aggregate the loss terms (pg, entropy, KL) by loss_agg_mode, as verl does; the indicator
    metrics (clip fractions, ppo_kl) are global token means in every mode, through `token_mean_weights` when the
    batch has them. `spec.off_policy=decoupled` weights the policy-gradient term by pi_prox / pi_behav
    (dagrl/algo/off_policy.py)."""
    weights = micro_batch["token_weights"]
    metric_weights = micro_batch.get("token_mean_weights", weights)
    advantages = micro_batch["advantages"]
    old_log_prob = micro_batch["old_log_probs"] if "old_log_probs" in micro_batch else log_prob.detach()
    pg, terms = policy_loss(spec, log_prob, old_log_prob, advantages, micro_batch["response_mask"])
    if spec.tis_imp_ratio_cap > 0 and "rollout_log_probs" in micro_batch:
        weight = truncated_is_weight(old_log_prob, micro_batch["rollout_log_probs"], spec.tis_imp_ratio_cap)
        pg = pg * weight
        terms["actor/tis_weight"] = weight
    if spec.off_policy == "decoupled":  # old_log_prob is pi_prox: the ratio and its clip above are against it
        pg = pg * behav_imp_weight(old_log_prob, micro_batch["rollout_log_probs"], spec.behav_imp_weight_cap)
    elif spec.off_policy != "none":
        raise ValueError(f"unknown off_policy {spec.off_policy!r}; valid: {', '.join(OFF_POLICY_MODES)}")
    metrics = {name: (value.detach() * metric_weights).sum() for name, value in terms.items()}
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
