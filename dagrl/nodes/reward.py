"""Reward nodes: rule scores right after rollout (or in the background beside the log-prob passes, where
reward_model.launch_reward_fn_async's switch in conf/dag/grpo.yaml moves the node); KL-in-reward once reference
log-probs exist."""

from __future__ import annotations

import torch

from dagrl.algo.kl import kl_penalty
from dagrl.config.errors import RunError
from dagrl.dag.graph import in_background
from dagrl.data.batch import Batch
from dagrl.nodes.context import StepContext
from dagrl.utils.dist import data_parallel_sums


def score(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    """The scores in the rollout layout, where filters (dynamic sampling) read them; stops a step whose every
    response failed. Every rank of a rollout-TP group scores the same shard: the sums count it once per rank.
    In the background (behind the reshard node) the all-failed check, a collective, is left to the main thread:
    the KL-in-reward node, which waits for the scores, makes it (`reward_failed` stays in the batch until then)."""
    batch, metrics = score_rows(ctx, batch)
    if not in_background():
        stop_if_every_score_failed(ctx, batch.pop("reward_failed"), model_parallel_size=1)
    return batch, metrics


def score_rows(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    """`token_level_scores`, per-response `score` and `acc` (what dynamic sampling may filter on) and `reward_failed`
    (1 for a response whose scorer failed). No collective, so it may run in the background."""
    scores, metrics, rows = ctx.reward_fn.score_batch(batch, ctx.tokenizer)
    sequence_scores = scores.sum(-1)  # on the CPU: a .item() on the GPU would wait for the other thread's kernels
    metrics.update(
        {
            "critic/score/mean": sequence_scores.mean().item(),
            "critic/score/max": sequence_scores.max().item(),
            "critic/score/min": sequence_scores.min().item(),
        }
    )
    device = batch["responses"].device
    batch["token_level_scores"] = scores.to(device)
    batch["reward_failed"] = rows.pop("failed")
    for key, values in rows.items():
        batch[key] = values.to(device)
    return batch, metrics


def check_background_scores(ctx: StepContext, batch: Batch) -> None:
    """The all-failed check of scores made in the background (`reward_failed` still in the batch), in the actor
    layout, where the ranks of one model-parallel group hold the same rows."""
    if "reward_failed" in batch:
        stop_if_every_score_failed(ctx, batch.pop("reward_failed"), ctx.shape.layout.model_parallel_size)


def stop_if_every_score_failed(ctx: StepContext, failed: torch.Tensor, model_parallel_size: int) -> None:
    """reward_model.on_error=zero keeps a run going past occasional scorer failures; a step where every response
    failed (a scorer that always raises or returns the wrong type) has no signal at all, and training on zeros
    would look like a run that succeeded. Summed over ranks, so all of them stop together rather than one waiting
    for the others in a collective."""
    totals = data_parallel_sums(
        torch.tensor([float(failed.sum()), float(len(failed))], dtype=torch.float64),
        model_parallel_size=model_parallel_size,
    )
    if totals[1] > 0 and totals[0] >= totals[1]:
        raise RunError(ctx.reward_fn.all_failed_message(int(round(float(totals[1]))), ctx.step))


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
