"""DAPO dynamic sampling (`algorithm.filter_groups.*`), right after scoring, in the rollout layout.

Keeps the groups (rows sharing `uid`) whose filter metric varies — a group whose responses all score the same has
zero GRPO advantage and teaches nothing — and, while fewer than data.train_batch_size groups are kept over all
ranks, draws the next global prompt batch from the trainer's seeded sampler (its state is checkpointed, so a
resumed run draws the same prompts), generates and scores it, and filters again. Counts are all-reduced, so every
rank runs the same number of rounds. The kept groups are then trimmed to exactly train_batch_size, taking them in
(round, rollout-DP shard) order; the reshard node after this one moves them to the actor layout.

When algorithm.filter_groups.max_num_gen_batches rounds are not enough, `on_limit` decides: `raise` stops the run
naming the keys, `smaller_batch` trains on the groups found (rounded down to a multiple of the actor DP size, so
every DP rank gets whole groups and the same number of them). max_num_gen_batches=0 (no limit of its own) still
stops a step after a whole epoch of prompts: past it the sampler only draws the same prompts again, and a task on
which every group scores alike would otherwise generate forever (generating counts as progress for the watchdog).
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from dagrl.data.batch import Batch
from dagrl.data.layout import group_rows
from dagrl.nodes.context import StepContext
from dagrl.nodes.common import scored
from dagrl.nodes.common import rollout_dp_rank, rollout_session, sampling_seed, train_sampling
from dagrl.utils.dist import data_parallel_sums

logger = logging.getLogger(__name__)

METRICS = ("acc", "score", "seq_reward", "seq_final_reward")


def group_metric(batch: Batch, metric: str) -> np.ndarray:
    """The per-response value a group must vary in (verl's names): acc / score from the scorer, seq_reward the
    shaped sequence score, seq_final_reward the sequence reward (= seq_reward here: KL-in-reward comes later)."""
    if metric in ("acc", "score"):
        values = batch[metric]
    elif metric == "seq_final_reward" and "token_level_rewards" in batch:
        values = batch["token_level_rewards"].sum(-1)
    elif metric in ("seq_reward", "seq_final_reward"):
        values = batch["token_level_scores"].sum(-1)
    else:
        raise ValueError(f"algorithm.filter_groups.metric={metric!r} is not one of: {', '.join(METRICS)}")
    return values.detach().double().cpu().numpy()


def varied_groups(uids, values: np.ndarray) -> list[np.ndarray]:
    """Rows of the groups to keep: those whose values are not all equal (a group of one is kept, as verl)."""
    return [rows for rows in group_rows(uids) if len(rows) == 1 or np.std(values[rows]) > 0]


def keep_counts(counts: np.ndarray, goal: int) -> np.ndarray:
    """How many kept groups each (round, shard) contributes when taking them in (round, shard) order up to
    `goal` groups; `counts` is [rounds, shards] and identical on every rank, so the trim is too."""
    flat = counts.reshape(-1)
    taken = np.minimum(flat, np.maximum(goal - (np.cumsum(flat) - flat), 0))
    return taken.reshape(counts.shape)


def _shard_counts(groups: int, ctx: StepContext) -> np.ndarray:
    """Kept groups of every rollout-DP shard (one rank per rollout-TP group reports; its peers hold copies)."""
    layout = ctx.shape.layout
    local = torch.zeros(layout.rollout_dp, dtype=torch.float64)
    if layout.is_rollout_tp_leader(ctx.rank):
        local[layout.rollout_dp_rank(ctx.rank)] = groups
    # a world sum (model_parallel_size=1): every shard has exactly one reporting rank
    return data_parallel_sums(local, model_parallel_size=1).round().long().numpy()


def _generate_round(ctx: StepContext, round_index: int) -> tuple[Batch, dict[str, float]]:
    """Fresh prompts from the sampler, sampled with a seed of their own round, then scored."""
    prompts = ctx.draw_prompts(ctx.step, round_index)
    seed = sampling_seed(
        ctx.cfg.actor_rollout_ref.rollout.seed, ctx.step, rollout_dp_rank(ctx), f"train/round{round_index}"
    )
    with rollout_session(ctx):
        batch = ctx.rollout.generate(prompts, train_sampling(ctx, prompts), seed=seed)
    return scored(ctx, batch)


def filter_groups(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    options = ctx.cfg.algorithm.filter_groups
    if not options.enable:
        return batch, {}
    if ctx.draw_prompts is None:
        raise RuntimeError("dynamic sampling needs StepContext.draw_prompts (the trainer sets it)")
    target, metric = ctx.cfg.data.train_batch_size, options.metric
    limit = options.max_num_gen_batches or epoch_rounds(ctx)
    kept: list[list[np.ndarray]] = []  # per round: rows of this rank's kept groups
    rounds: list[Batch] = []
    counts: list[np.ndarray] = []  # per round: kept groups per rollout-DP shard (global)
    current = batch
    while True:
        groups = varied_groups(current["uid"], group_metric(current, metric))
        rounds.append(current)
        kept.append(groups)
        counts.append(_shard_counts(len(groups), ctx))
        total = int(np.sum(counts))
        if total >= target:
            goal = target
            break
        if limit and limit <= len(rounds):
            goal = _goal_at_limit(ctx, total, len(rounds))
            break
        current, _ = _generate_round(ctx, len(rounds))

    take = keep_counts(np.stack(counts), goal)[:, rollout_dp_rank(ctx)]
    record_dropped(ctx, rounds, kept, take)
    parts = [
        round_batch.select(np.concatenate(groups[:count]))
        for round_batch, groups, count in zip(rounds, kept, take)
        if count
    ]
    out = Batch.concat(parts) if parts else batch.select([])  # a rank may contribute no group
    # The score and response-length metrics stay those of the step's first generation (fresh prompts, unfiltered).
    return out, {
        "train/num_gen_batches": float(len(rounds)),
        "train/num_generated_groups": float(len(rounds) * target),
        "train/num_kept_groups": float(total),
        "train/num_batch_groups": float(goal),
    }


def record_dropped(ctx: StepContext, rounds: list[Batch], kept: list[list[np.ndarray]], take: np.ndarray) -> None:
    """For the prompt ledger: each group this rank drops, by its prompt's `ledger_uid` -> zero_variance (its
    metric did not vary) or surplus (it varied, but the batch was full without it)."""
    for round_batch, groups, count in zip(rounds, kept, take):
        if "ledger_uid" not in round_batch:
            continue
        ledger_uids = round_batch["ledger_uid"]
        varied = {int(rows[0]) for rows in groups}
        taken = {int(rows[0]) for rows in groups[:count]}
        for rows in group_rows(round_batch["uid"]):
            first = int(rows[0])
            if first not in taken:
                ctx.dropped[ledger_uids[first]] = "surplus" if first in varied else "zero_variance"


def epoch_rounds(ctx: StepContext) -> int:
    """Generation batches of data.train_batch_size prompts that draw a whole epoch (0: the data's size unknown)."""
    rows = ctx.shape.train_rows
    return -(-rows // ctx.cfg.data.train_batch_size) if rows else 0


def _goal_at_limit(ctx: StepContext, total: int, rounds: int) -> int:
    options = ctx.cfg.algorithm.filter_groups
    target, dp = ctx.cfg.data.train_batch_size, ctx.shape.layout.dp
    limit = options.max_num_gen_batches
    bound = (
        f"algorithm.filter_groups.max_num_gen_batches={limit}"
        if limit
        else f"a whole epoch of the {ctx.shape.train_rows} training prompts, where "
        f"algorithm.filter_groups.max_num_gen_batches=0 stops a step"
    )
    found = (
        f"only {total} of data.train_batch_size={target} groups had a varying "
        f"algorithm.filter_groups.metric={options.metric} after {rounds} generation batches ({bound})"
    )
    if options.on_limit == "raise":
        more = "raise max_num_gen_batches (0 = one epoch)" if limit else f"set max_num_gen_batches above {rounds}"
        raise RuntimeError(
            f"dynamic sampling: {found}; {more}, set "
            f"algorithm.filter_groups.on_limit=smaller_batch to train on the groups found, "
            f"or use data the model gets right only some of the time"
        )
    goal = total // dp * dp
    if goal == 0:
        raise RuntimeError(
            f"dynamic sampling: {found}, fewer than the {dp} actor-DP ranks need "
            f"(algorithm.filter_groups.on_limit=smaller_batch); raise max_num_gen_batches"
        )
    logger.warning("dynamic sampling: %s; training on %d groups (on_limit=smaller_batch)", found, goal)
    return goal
