"""Log-prob nodes: the actor's log-probs before the update (old) and the frozen reference's."""
from __future__ import annotations

from dagrl.data.batch import Batch
from dagrl.nodes.context import StepContext


def on_policy_single_update(ctx: StepContext) -> bool:
    """One optimizer step per batch: old log-probs equal the update's own (detached) log-probs, so skip them."""
    actor = ctx.cfg.actor_rollout_ref.actor
    return (actor.ppo_epochs == 1 and actor.ppo_mini_batch_size == ctx.cfg.data.train_batch_size
            and not ctx.cfg.algorithm.use_kl_in_reward)


def old_log_prob(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    if on_policy_single_update(ctx):
        return batch, {}
    rollout = ctx.cfg.actor_rollout_ref.rollout
    log_probs, entropy = ctx.actor.compute_log_prob(batch, micro_batch_size=rollout.log_prob_micro_batch_size_per_gpu,
                                                    temperature=rollout.temperature, with_entropy=True)
    batch["old_log_probs"] = log_probs
    mask = batch["response_mask"].float()
    return batch, {"actor/entropy": ((entropy * mask).sum() / mask.sum().clamp(min=1)).item()}


def ref_log_prob(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    if ctx.reference is None:
        return batch, {}
    log_probs, _ = ctx.reference.compute_log_prob(
        batch, micro_batch_size=ctx.cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu,
        temperature=ctx.cfg.actor_rollout_ref.rollout.temperature, with_entropy=False)
    batch["ref_log_prob"] = log_probs
    return batch, {}
