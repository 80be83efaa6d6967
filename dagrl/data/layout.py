"""Moving a batch from the rollout layout to the actor layout.

Rollout layout: rollout DP = world / rollout TP; consecutive ranks form one rollout-TP group and hold the same
rows (the trainer shards prompts by `rank // rollout_tp`). Actor layout: actor DP = world / (TP·PP·CP) in
Megatron-Core's default rank order "tp-cp-ep-dp-pp", i.e. rank = tp + TP·(cp + CP·(dp + DP·pp)), so the actor-DP
rank of a rank is `(rank // (TP·CP)) % DP` (EP lives in a separate rank generator and does not change it). Every
rank of one actor model-parallel group (same DP rank) must receive the identical batch.

The planning functions below are pure (numpy only, no torch, no megatron): given the global batch's group ids and
token counts they say which global rows each actor-DP rank gets. The plan depends only on the global batch and the
config, never on the rollout layout beyond the global row order, so a resumed run moves rows exactly as the
original did. Groups (rows sharing `uid`) stay whole on one DP rank, because advantages are computed per rank.

Mini-batch alignment: the actor node splits each rank's rows into consecutive mini-batches of
ppo_mini_batch_size·n/DP rows. When ppo_mini_batch_size groups divide evenly over the DP ranks, the plan deals each
global mini-batch (a consecutive run of ppo_mini_batch_size groups) over the ranks, so every optimizer step sees the
same groups whatever the layout. With `balance`, each mini-batch's groups are dealt so that ranks get equal group
counts and nearly equal token totals (see `partition_groups`).

The collective (`to_actor_layout`) is an all_gather_object of every rollout-TP group's shard on the CPU: every
rank receives the whole global batch and keeps its rows. That costs global-batch-sized host traffic per rank and
moves GPU tensors through host memory; it is simple and exact, and fine at the batch sizes RL uses (a point-to-point
exchange of only the needed rows is the optimisation left for later).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from dagrl.data.batch import Batch


@dataclass(frozen=True)
class LayoutSpec:
    """Both layouts of one run: world size, rollout TP and the actor's TP, PP, CP."""
    world_size: int
    rollout_tp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1

    def __post_init__(self) -> None:
        if self.world_size % self.rollout_tp:
            raise ValueError(f"world size {self.world_size} is not divisible by rollout TP {self.rollout_tp}")
        if self.world_size % (self.tp * self.pp * self.cp):
            raise ValueError(f"world size {self.world_size} is not divisible by TP x PP x CP = "
                             f"{self.tp}x{self.pp}x{self.cp}")

    @property
    def rollout_dp(self) -> int:
        return self.world_size // self.rollout_tp

    @property
    def actor_dp(self) -> int:
        return self.world_size // (self.tp * self.pp * self.cp)

    def rollout_dp_rank(self, rank: int) -> int:
        return rank // self.rollout_tp

    def actor_dp_rank(self, rank: int) -> int:
        """Megatron-Core's data-parallel rank of `rank` under the default order tp-cp-ep-dp-pp."""
        return (rank // (self.tp * self.cp)) % self.actor_dp

    def rollout_sources(self) -> list[int]:
        """One rank per rollout-TP group (its first): the ranks whose rows make up the global batch, in order."""
        return list(range(0, self.world_size, self.rollout_tp))


# ---- planning (pure) -------------------------------------------------------------------------------------
def group_rows(uids: Sequence) -> list[np.ndarray]:
    """Global row indices of each group, groups in order of first appearance, rows in order."""
    members: dict[object, list[int]] = {}
    for row, uid in enumerate(uids):
        members.setdefault(uid, []).append(row)
    return [np.asarray(rows, dtype=np.int64) for rows in members.values()]


def _deal_balanced(group_ids: Sequence[int], tokens: Sequence[int], dp: int) -> list[list[int]]:
    """Equal group counts per bin, nearly equal token totals: groups sorted by tokens (largest first, ties by
    index) are dealt in rounds of `dp`; each round gives its largest group to the lightest bin so far, the next
    to the next lightest, ... (ties by bin index). By induction over rounds, the spread between the heaviest and
    lightest bin never exceeds the largest group's tokens. Deterministic: no randomness, total orders only."""
    order = sorted(group_ids, key=lambda g: (-tokens[g], g))
    loads = [0] * dp
    bins: list[list[int]] = [[] for _ in range(dp)]
    for start in range(0, len(order), dp):
        lightest = sorted(range(dp), key=lambda b: (loads[b], b))
        for group, target in zip(order[start:start + dp], lightest):
            bins[target].append(group)
            loads[target] += tokens[group]
    return [sorted(members) for members in bins]


def partition_groups(group_tokens: Sequence[int], dp: int, groups_per_mini_batch: int | None = None,
                     balance: bool = False) -> list[list[int]]:
    """Group indices (into `group_tokens`) for each of `dp` ranks, every rank getting the same number.

    Groups are taken in consecutive chunks of `groups_per_mini_batch` (one global mini-batch each) when that
    divides over `dp`, else as one chunk; each chunk is split over the ranks, contiguously or, with `balance`,
    by token count (`_deal_balanced`). A rank's list is its chunks' groups in chunk order."""
    count = len(group_tokens)
    if dp <= 0 or count % dp:
        raise ValueError(f"{count} groups cannot be split evenly over {dp} actor-DP ranks; the number of prompts "
                         f"per step (data.train_batch_size) must be a multiple of the actor DP size")
    chunk = groups_per_mini_batch if groups_per_mini_batch and groups_per_mini_batch % dp == 0 else count
    chunk = max(chunk, 1)
    ranks: list[list[int]] = [[] for _ in range(dp)]
    for start in range(0, count, chunk):
        ids = list(range(start, min(start + chunk, count)))
        if balance:
            bins = _deal_balanced(ids, group_tokens, dp)
        else:
            per_rank = len(ids) // dp
            bins = [ids[d * per_rank:(d + 1) * per_rank] for d in range(dp)]
        for rank_groups, members in zip(ranks, bins):
            rank_groups.extend(members)
    return ranks


@dataclass(frozen=True)
class LayoutPlan:
    rows: list[np.ndarray]       # global row indices per actor-DP rank, in the order the rank holds them
    metrics: dict[str, float]


def plan_rows(uids: Sequence, row_tokens: Sequence[int], dp: int, groups_per_mini_batch: int | None = None,
              balance: bool = False) -> LayoutPlan:
    """Which global rows each actor-DP rank gets (see `partition_groups`), plus verl's `global_seqlen/*`
    balance metrics when `balance` (token totals per rank without and with balancing)."""
    groups = group_rows(uids)
    sizes = {len(rows) for rows in groups}
    if len(sizes) > 1:
        raise ValueError(f"groups (rows sharing a uid) have different sizes {sorted(sizes)}; the actor layout "
                         f"needs equal groups so that every DP rank gets the same number of rows")
    row_tokens = np.asarray(row_tokens, dtype=np.int64)
    group_tokens = [int(row_tokens[rows].sum()) for rows in groups]
    parts = partition_groups(group_tokens, dp, groups_per_mini_batch, balance)
    rows = [np.concatenate([groups[g] for g in part]) if part else np.zeros(0, dtype=np.int64) for part in parts]
    metrics: dict[str, float] = {}
    if balance:
        plain = [sum(group_tokens[g] for g in part) for part in partition_groups(group_tokens, dp,
                                                                                 groups_per_mini_batch)]
        balanced = [sum(group_tokens[g] for g in part) for part in parts]
        metrics = {"global_seqlen/min": float(min(plain)), "global_seqlen/max": float(max(plain)),
                   "global_seqlen/minmax_diff": float(max(plain) - min(plain)),
                   "global_seqlen/balanced_min": float(min(balanced)),
                   "global_seqlen/balanced_max": float(max(balanced)),
                   "global_seqlen/mean": float(np.mean(balanced))}
    return LayoutPlan(rows=rows, metrics=metrics)


# ---- the collective ---------------------------------------------------------------------------------------
def gather_global_batch(local: "Batch", spec: LayoutSpec) -> "Batch":
    """The global batch on every rank: the shards of the rollout-TP groups' first ranks, in rank order."""
    import torch.distributed as dist

    from dagrl.data.batch import Batch
    from dagrl.utils.dist import is_initialized, rank as this_rank

    if spec.world_size == 1 or not is_initialized():
        return local
    mine = local.to("cpu") if this_rank() % spec.rollout_tp == 0 else None  # the others' copies are identical
    gathered: list = [None] * spec.world_size
    dist.all_gather_object(gathered, mine)
    return Batch.concat(gathered[source] for source in spec.rollout_sources())


def to_actor_layout(local: "Batch", spec: LayoutSpec, groups_per_mini_batch: int | None = None,
                    balance: bool = False) -> tuple["Batch", dict[str, float]]:
    """This rank's actor-layout batch (tensors back on the device they came from) and the plan's metrics.

    Collective: every rank must call it. `local` is this rank's rollout-layout batch with a `uid` column."""
    from dagrl.utils.dist import rank as this_rank

    devices = {key: value.device for key, value in local.tensors.items()}
    global_batch = gather_global_batch(local, spec)
    tokens = global_batch["attention_mask"].sum(-1).tolist()
    plan = plan_rows(global_batch["uid"], tokens, spec.actor_dp, groups_per_mini_batch, balance)
    out = global_batch.select(plan.rows[spec.actor_dp_rank(this_rank())])
    for key, device in devices.items():
        out.tensors[key] = out.tensors[key].to(device)
    return out, plan.metrics
