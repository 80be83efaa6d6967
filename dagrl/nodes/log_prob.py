"""Log-prob nodes: the actor's log-probs before the update (old) and the frozen reference's."""

from __future__ import annotations


import torch

from dagrl.algo.advantage import ReduceSum
from dagrl.config.derived import skips_old_log_prob
from dagrl.data.batch import Batch
from dagrl.nodes.common import token_budget
from dagrl.nodes.common import masked_stats
from dagrl.nodes.context import StepContext


def rollout_mismatch(
    old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor, reduce_sum: ReduceSum
) -> dict[str, float]:
    """How far the rollout engine's token log-probs are from the actor's on the same tokens, over the global batch.

    Collective: token means over DP shards (`reduce_sum`) and the max over all ranks, so every rank returns the same
    values and the loop's averaging over ranks keeps them (a per-rank max averaged would understate the max).
    verl's training/rollout_probs_diff_* compare probabilities; the log-prob gap is the sharper signal."""
    old, rollout = old_log_probs.float(), rollout_log_probs.float()
    log_gap = masked_stats("log", (old - rollout).abs(), response_mask, reduce_sum)
    probs = masked_stats("probs", (old.exp() - rollout.exp()).abs(), response_mask, reduce_sum)
    return {
        "training/rollout_log_probs_diff_mean": log_gap["log/mean"],
        "training/rollout_probs_diff_mean": probs["probs/mean"],
        "training/rollout_probs_diff_max": probs["probs/max"],
    }


def old_log_prob(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    if skips_old_log_prob(ctx.cfg):
        return batch, {}
    from dagrl.engine.megatron.router_replay import old_log_prob_pass

    rollout = ctx.cfg.actor_rollout_ref.rollout
    mode = ctx.cfg.actor_rollout_ref.actor.router_replay.mode
    routing = old_log_prob_pass(mode, "routed_experts" in batch)
    log_probs, entropy = ctx.actor.compute_log_prob(
        batch,
        micro_batch_size=ctx.schedule.old_log_prob_micro_batch,
        temperature=rollout.temperature,
        with_entropy=True,
        max_token_len=token_budget(rollout, "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu"),
        **({} if routing is None else {"routing": routing}),
    )
    batch["old_log_probs"] = log_probs
    mask = batch["response_mask"].float()
    metrics = {"actor/entropy": ((entropy * mask).sum() / mask.sum().clamp(min=1)).item()}
    if routing is not None:
        agreed, compared = ctx.dp_sums(torch.tensor([routing.agreed, routing.compared])).tolist()
        if compared:  # the share of top-k choices where the actor's router picks the rollout's experts
            metrics["actor/routing_agreement"] = agreed / compared
        if mode == "R2":  # the update replays the routes of this pass
            batch["routed_experts"] = routing.routes.to(batch["input_ids"].device)
    if "rollout_log_probs" in batch:
        metrics.update(rollout_mismatch(log_probs, batch["rollout_log_probs"], batch["response_mask"], ctx.dp_sums))
    return batch, metrics


def ref_log_prob(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    if ctx.reference is None:
        return batch, {}
    ref = ctx.cfg.actor_rollout_ref.ref
    log_probs, _ = ctx.reference.compute_log_prob(
        batch,
        micro_batch_size=ctx.schedule.ref_log_prob_micro_batch,
        temperature=ctx.cfg.actor_rollout_ref.rollout.temperature,
        with_entropy=False,
        max_token_len=token_budget(ref, "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu"),
    )
    batch["ref_log_prob"] = log_probs
    return batch, {}
