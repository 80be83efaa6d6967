"""Log-prob nodes: the actor's log-probs before the update (old) and the frozen reference's."""
from __future__ import annotations

import torch

from dagrl.config.derived import skips_old_log_prob
from dagrl.data.batch import Batch
from dagrl.nodes.context import StepContext


def rollout_mismatch(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor,
                     response_mask: torch.Tensor) -> dict[str, float]:
    """How far the rollout engine's token log-probs are from the actor's on the same tokens (this rank's rows).

    verl's training/rollout_probs_diff_* compare probabilities; the log-prob gap is the sharper signal."""
    mask = response_mask.bool()
    if not mask.any():
        return {}
    old, rollout = old_log_probs[mask].float(), rollout_log_probs[mask].float()
    probs_diff = (old.exp() - rollout.exp()).abs()
    return {"training/rollout_log_probs_diff_mean": (old - rollout).abs().mean().item(),
            "training/rollout_probs_diff_mean": probs_diff.mean().item(),
            "training/rollout_probs_diff_max": probs_diff.max().item()}


def old_log_prob(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    if skips_old_log_prob(ctx.cfg):
        return batch, {}
    rollout = ctx.cfg.actor_rollout_ref.rollout
    log_probs, entropy = ctx.actor.compute_log_prob(batch, micro_batch_size=rollout.log_prob_micro_batch_size_per_gpu,
                                                    temperature=rollout.temperature, with_entropy=True)
    batch["old_log_probs"] = log_probs
    mask = batch["response_mask"].float()
    metrics = {"actor/entropy": ((entropy * mask).sum() / mask.sum().clamp(min=1)).item()}
    if "rollout_log_probs" in batch:
        metrics.update(rollout_mismatch(log_probs, batch["rollout_log_probs"], batch["response_mask"]))
    return batch, metrics


def ref_log_prob(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    if ctx.reference is None:
        return batch, {}
    log_probs, _ = ctx.reference.compute_log_prob(
        batch, micro_batch_size=ctx.cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu,
        temperature=ctx.cfg.actor_rollout_ref.rollout.temperature, with_entropy=False)
    batch["ref_log_prob"] = log_probs
    return batch, {}
