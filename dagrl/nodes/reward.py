"""Reward nodes: rule scores right after rollout; KL-in-reward once reference log-probs exist."""
from __future__ import annotations

import torch

from dagrl.algo.kl import kl_penalty
from dagrl.config.errors import RunError
from dagrl.data.batch import Batch
from dagrl.nodes.context import StepContext
from dagrl.utils.dist import data_parallel_sums


def score(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    scores, metrics, rows = ctx.reward_fn.score_batch(batch, ctx.tokenizer)
    stop_if_every_score_failed(ctx, metrics.get("reward/errors", 0.0), len(batch))
    batch["token_level_scores"] = scores
    for key, values in rows.items():  # per-response `score` and `acc` (what dynamic sampling may filter on)
        batch[key] = values.to(scores.device)
    sequence_scores = scores.sum(-1)
    metrics.update({
        "critic/score/mean": sequence_scores.mean().item(),
        "critic/score/max": sequence_scores.max().item(),
        "critic/score/min": sequence_scores.min().item(),
    })
    return batch, metrics


def stop_if_every_score_failed(ctx: StepContext, errors: float, size: int) -> None:
    """reward_model.on_error=zero keeps a run going past occasional scorer failures; a step where every response
    failed (a scorer that always raises or returns the wrong type) has no signal at all, and training on zeros
    would look like a run that succeeded. Summed over ranks (every rank of this pool scores its shard), so all
    of them stop together rather than one waiting for the others in a collective."""
    totals = data_parallel_sums(torch.tensor([errors, float(size)], dtype=torch.float64), model_parallel_size=1)
    if totals[1] > 0 and totals[0] >= totals[1]:
        raise RunError(ctx.reward_fn.all_failed_message(int(round(float(totals[1]))), ctx.step))


def apply_kl_in_reward(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    """token_level_rewards = scores - beta * KL(actor || ref) when algorithm.use_kl_in_reward, else scores."""
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
    totals = data_parallel_sums(torch.stack([per_sequence.sum().double(), torch.tensor(float(len(batch)),
                                             dtype=torch.float64)]), ctx.shape.layout.model_parallel_size)
    responses = int(round(float(totals[1])))
    sequence_kl = float(totals[0]) / max(responses, 1)
    ctx.kl_ctrl.update(sequence_kl, n_steps=responses)
    return batch, {"critic/rewards/mean": rewards.sum(-1).mean().item(),
                   "actor/reward_kl_penalty": sequence_kl, "actor/reward_kl_penalty_coeff": beta}
