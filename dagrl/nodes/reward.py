"""Reward nodes: rule scores right after rollout (or in the background beside the log-prob passes, where
reward_model.launch_reward_fn_async's switch in conf/dag/grpo.yaml moves the node); KL-in-reward once reference
log-probs exist."""

from __future__ import annotations

import torch

from dagrl.algo.kl import kl_penalty
from dagrl.dag.graph import in_background
from dagrl.data.batch import Batch
from dagrl.nodes.common import score_rows, stop_if_every_score_failed, scored
from dagrl.nodes.context import StepContext


def score(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    """The scores in the rollout layout, where filters (dynamic sampling) read them; stops a step whose every
    response failed. Every rank of a rollout-TP group scores the same shard: the sums count it once per rank.
    In the background (behind the reshard node) the all-failed check, a collective, is left to the main thread:
    the KL-in-reward node, which waits for the scores, makes it (`reward_failed` stays in the batch until then)."""
    return score_rows(ctx, batch) if in_background() else scored(ctx, batch)


def check_background_scores(ctx: StepContext, batch: Batch) -> None:
    """The all-failed check of scores made in the background (`reward_failed` still in the batch), in the actor
    layout, where the ranks of one model-parallel group hold the same rows."""
    if "reward_failed" in batch:
        stop_if_every_score_failed(ctx, batch.pop("reward_failed"), ctx.shape.layout.model_parallel_size)


def apply_kl_in_reward(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    """token_level_rewards = scores - beta * KL(actor || ref) when algorithm.use_kl_in_reward, else scores."""
    check_background_scores(ctx, batch)
    algorithm = ctx.cfg.algorithm
    scores = batch["token_level_scores"]
    if not algorithm.use_kl_in_reward:
        batch["token_level_rewards"] = scores
        return batch, {"critic/rewards/mean": scores.sum(-1).mean().item()}
    mask = batch["response_mask"].float()
    kl = kl_penalty(batch["old_log_probs"], batch["ref_log_prob"], algorithm.kl_penalty) * mask
    beta = ctx.kl_ctrl.value
    rewards = scores - beta * kl
    batch["token_level_rewards"] = rewards
    # the controller is global state: update it with the mean over every DP shard so all ranks (and a run at
    # another layout) keep the same coefficient
    per_sequence = kl.sum(-1) / mask.sum(-1).clamp(min=1)
    totals = ctx.dp_sums(
        torch.stack([per_sequence.sum().double(), torch.tensor(float(len(batch)), dtype=torch.float64)])
    )
    responses = int(round(float(totals[1])))
    sequence_kl = float(totals[0]) / max(responses, 1)
    ctx.kl_ctrl.update(sequence_kl, n_steps=responses)
    return batch, {
        "critic/rewards/mean": rewards.sum(-1).mean().item(),
        "actor/reward_kl_penalty": sequence_kl,
        "actor/reward_kl_penalty_coeff": beta,
    }
