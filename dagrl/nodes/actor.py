"""Actor update node: PPO epochs over mini-batches, one optimizer step per mini-batch."""

from __future__ import annotations

import functools


from dagrl.algo.off_policy import off_policy_metrics, off_policy_sums
from dagrl.algo.policy_loss import PolicyLossSpec, actor_loss, loss_options
from dagrl.config.derived import skips_old_log_prob
from dagrl.config.errors import RunError
from dagrl.engine.megatron.router_replay import update_pass
from dagrl.data.batch import Batch
from dagrl.nodes.common import NO_ROLLOUT_LOG_PROBS, reject_sequences
from dagrl.nodes.common import mean_over_mini_batches, token_budget, weighted_mini_batches
from dagrl.nodes.context import StepContext
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
    mode = actor_cfg.router_replay.mode
    replays = mode == "R3" or (mode == "R2" and not skips_old_log_prob(ctx.cfg))  # R2: that pass's routes
    routing = {"routing": update_pass(mode, "routed_experts" in batch)} if replays else {}
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
                **routing,
            )
        )
    if nan_injected(ctx.step, "DAGRL_INJECT_NAN_WEIGHTS"):
        next(p for module in ctx.actor.modules for p in module.parameters() if p.requires_grad).data.fill_(float("nan"))
    ctx.versions.actor += 1
    return batch, {**mean_over_mini_batches(steps), **correction}
