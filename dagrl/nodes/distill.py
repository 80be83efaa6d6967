"""On-policy distillation nodes (dag=opd): the frozen teacher's log-probs of the sampled tokens, then the
reverse KL(student || teacher) as per-token advantage (dagrl/algo/distill.py)."""

from __future__ import annotations


from dagrl.algo.distill import DistillSpec, distill_advantages
from dagrl.config.tree import Cfg
from dagrl.data.batch import Batch
from dagrl.nodes.common import token_budget
from dagrl.nodes.common import masked_stats
from dagrl.nodes.context import StepContext


def teacher_log_prob(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    teacher = ctx.cfg.distillation.teacher_model
    rollout = ctx.cfg.actor_rollout_ref.rollout  # the teacher reads what the old log-prob pass reads: its budget
    log_probs, _ = ctx.teacher.compute_log_prob(
        batch,
        micro_batch_size=teacher.log_prob_micro_batch_size_per_gpu,
        temperature=rollout.temperature,
        with_entropy=False,
        max_token_len=token_budget(rollout, "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu"),
    )
    batch["teacher_log_probs"] = log_probs
    return batch, {}


def distill_spec(cfg: Cfg) -> DistillSpec:
    loss = cfg.distillation.distillation_loss
    return DistillSpec(
        loss_mode=loss.loss_mode,
        use_task_rewards=loss.use_task_rewards,
        coef=loss.distillation_loss_coef,
        loss_max_clamp=loss.loss_max_clamp,
        log_prob_min_clamp=loss.log_prob_min_clamp,
    )


def distill_advantage(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    """Advantages from the teacher: the student's log-probs are the actor's before this step's update (the
    policy that sampled, as the ratio's denominator)."""
    mask = batch.get("loss_mask", batch["response_mask"])
    advantages, kl = distill_advantages(
        batch["advantages"], batch["old_log_probs"], batch["teacher_log_probs"], mask, distill_spec(ctx.cfg)
    )
    batch["advantages"] = advantages
    reduce_sum = ctx.dp_sums
    gap = masked_stats("gap", batch["old_log_probs"].float() - batch["teacher_log_probs"].float(), mask, reduce_sum)
    loss = masked_stats("loss", kl, mask, reduce_sum)
    return batch, {
        "distillation/reverse_kl": gap["gap/mean"],
        "distillation/loss": loss["loss/mean"],
        "distillation/loss_max": loss["loss/max"],
        "distillation/loss_min": loss["loss/min"],
        **masked_stats("critic/advantages", advantages, mask, reduce_sum),
    }
