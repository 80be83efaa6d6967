"""Actor update node: PPO epochs over mini-batches, one optimizer step per mini-batch."""

from __future__ import annotations

import functools
from collections import defaultdict
from typing import Iterator

import numpy as np
import torch

from dagrl.algo.off_policy import off_policy_metrics, off_policy_sums
from dagrl.algo.policy_loss import PolicyLossSpec, actor_loss, aggregation_counts, loss_options, token_weights
from dagrl.config.derived import skips_old_log_prob
from dagrl.config.errors import RunError
from dagrl.config.tree import Cfg
from dagrl.data.batch import Batch
from dagrl.nodes.advantage import NO_ROLLOUT_LOG_PROBS, reject_sequences
from dagrl.nodes.context import StepContext
from dagrl.plan.schedule import CriticSchedule, Schedule
from dagrl.utils.faults import nan_injected


def policy_loss_spec(ctx: StepContext) -> PolicyLossSpec:
    actor = ctx.cfg.actor_rollout_ref.actor
    clip = actor.clip_ratio
    return PolicyLossSpec(
        loss_mode=actor.policy_loss.loss_mode,
        clip_ratio_low=clip if actor.clip_ratio_low is None else actor.clip_ratio_low,
        clip_ratio_high=clip if actor.clip_ratio_high is None else actor.clip_ratio_high,
        clip_ratio_c=actor.clip_ratio_c,
        entropy_coeff=actor.entropy_coeff,
        use_kl_loss=actor.use_kl_loss,
        kl_loss_coef=actor.kl_loss_coef,
        kl_loss_type=actor.kl_loss_type,
        loss_agg_mode=actor.loss_agg_mode,
        loss_scale_factor=actor.loss_scale_factor or ctx.shape.response_length,
        tis_imp_ratio_cap=actor.tis_imp_ratio_cap,
        off_policy=actor.policy_loss.off_policy,
        behav_imp_weight_cap=actor.policy_loss.behav_imp_weight_cap,
        **loss_options(actor),
    )


def token_budget(section: Cfg, switch: str, budget: str) -> int | None:
    """verl's dynamic batch size: `section.<budget>` tokens per micro-batch when `section.<switch>` is on, else None
    (micro-batches of a fixed row count)."""
    return section[budget] if section[switch] else None


def weighted_mini_batches(
    ctx: StepContext,
    batch: Batch,
    cut: Schedule | CriticSchedule,
    shuffle: bool,
    loss_agg_mode: str,
    loss_scale_factor: float | None,
) -> Iterator[Batch]:
    """`cut.ppo_epochs` passes over this rank's rows in mini-batches of `cut.mini_batch_rows_per_rank` rows (the step's
    schedule, the actor's or the critic's; reshuffled each pass when `shuffle`). Each mini-batch gets
    `token_weights` for its global `loss_agg_mode` aggregate and `token_mean_weights` (a global token mean, for
    metrics), both from token and sequence counts summed over the DP ranks. Tokens are those of `loss_mask` where
    the batch has one (sequence masking), else of `response_mask`; sequences are those with a response token, masked
    or not, since verl's seq-mean modes divide by the nominal ppo_mini_batch_size x rollout.n however many it
    rejected."""
    for epoch in range(cut.ppo_epochs):
        order = np.arange(len(batch))
        if shuffle:
            order = np.random.default_rng([ctx.cfg.data.seed, ctx.step, epoch]).permutation(len(batch))
        for mini_batch in batch.select(order).split(cut.mini_batch_rows_per_rank):
            mask = mini_batch.get("loss_mask", mini_batch["response_mask"])
            counts = torch.stack([aggregation_counts(mask)[0], aggregation_counts(mini_batch["response_mask"])[1]])
            tokens, sequences = ctx.dp_sums(counts).tolist()
            mini_batch["token_weights"] = token_weights(mask, loss_agg_mode, tokens, sequences, loss_scale_factor)
            mini_batch["token_mean_weights"] = token_weights(mask, "token-mean", tokens)  # clip fractions, ppo_kl
            yield mini_batch


def mean_over_mini_batches(steps: list[dict[str, float]]) -> dict[str, float]:
    """Each metric's mean over the optimizer steps of one update."""
    per_key: dict[str, list[float]] = defaultdict(list)
    for metrics in steps:
        for key, value in metrics.items():
            per_key[key].append(value)
    return {key: float(np.mean(values)) for key, values in per_key.items()}


def off_policy_view(ctx: StepContext, batch: Batch, spec: PolicyLossSpec) -> tuple[Batch, dict[str, float]]:
    """The batch the actor trains on, and the off-policy metrics over the global batch (dagrl/algo/off_policy.py).
    With actor.mis_ratio_low/high set, the sequences outside the band have a `loss_mask` of 0, which the advantage
    node already put in the batch (before the advantage and the critic, as verl); a graph without that node gets
    it here."""
    actor = ctx.cfg.actor_rollout_ref.actor
    masking = (actor.mis_ratio_low, actor.mis_ratio_high) != (None, None)
    if spec.off_policy == "none" and not masking:
        return batch, {}
    batch = reject_sequences(ctx.cfg, batch)
    if "rollout_log_probs" not in batch:
        raise RunError(
            f"actor_rollout_ref.actor.policy_loss.off_policy=decoupled needs the rollout's log-probs, "
            f"{NO_ROLLOUT_LOG_PROBS}"
        )
    prox, behav, mask = batch["old_log_probs"], batch["rollout_log_probs"], batch["response_mask"]
    keep = batch.get("loss_mask", mask).bool().any(-1)  # rows without response tokens count as neither
    sums = off_policy_sums(prox, behav, mask, keep, spec.behav_imp_weight_cap)
    sums = ctx.dp_sums(sums).tolist()
    return batch, off_policy_metrics(sums, decoupled=spec.off_policy == "decoupled", masking=masking)


def update_actor(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    if ctx.step <= ctx.cfg.trainer.critic_warmup:  # only the critic learns during its warmup (pre-flight: PPO only)
        return batch, {}
    actor_cfg = ctx.cfg.actor_rollout_ref.actor
    spec = policy_loss_spec(ctx)
    loss_fn = functools.partial(actor_loss, spec=spec)
    # As verl: the update computes entropy only when it is in the loss; actor/entropy otherwise comes from the
    # old-log-prob pass, unless that pass is skipped.
    with_entropy = spec.entropy_coeff != 0 or skips_old_log_prob(ctx.cfg)
    train_batch, correction = off_policy_view(ctx, batch, spec)
    steps = []
    for mini_batch in weighted_mini_batches(
        ctx, train_batch, ctx.schedule, actor_cfg.shuffle, spec.loss_agg_mode, spec.loss_scale_factor
    ):
        if nan_injected(ctx.step):
            mini_batch["token_weights"] = mini_batch["token_weights"] * float("nan")
        steps.append(
            ctx.actor.train_step(
                mini_batch,
                loss_fn,
                micro_batch_size=ctx.schedule.micro_batch,
                temperature=ctx.cfg.actor_rollout_ref.rollout.temperature,
                max_token_len=token_budget(actor_cfg, "use_dynamic_bsz", "ppo_max_token_len_per_gpu"),
                with_entropy=with_entropy,
            )
        )
    if nan_injected(ctx.step, "DAGRL_INJECT_NAN_WEIGHTS"):
        next(p for module in ctx.actor.modules for p in module.parameters() if p.requires_grad).data.fill_(float("nan"))
    ctx.versions.actor += 1
    return batch, {**mean_over_mini_batches(steps), **correction}
