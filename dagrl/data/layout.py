"""Moving a batch from the rollout layout to the actor layout.

Both layouts come from one `WorldLayout` (dagrl/placement/layout.py): rollout DP = world / rollout TP, consecutive
ranks of one rollout-TP group hold the same rows (the trainer shards prompts by `rollout_dp_rank`); actor DP =
world / (TP·PP·CP), and every rank of one actor model-parallel group (same `dp_rank`) must receive the identical
batch.

The planning functions below are pure (numpy only, no torch, no megatron): given the global batch's group ids and
token counts they say which global rows each actor-DP rank gets. The plan depends only on the global batch and the
config, never on the rollout layout beyond the global row order, so a resumed run moves rows exactly as the
original did. Groups (rows sharing `uid`) stay whole on one DP rank, because advantages are computed per rank.

Mini-batch alignment: the actor node splits each rank's rows into consecutive mini-batches of
ppo_mini_batch_size·n/DP rows. When ppo_mini_batch_size groups divide evenly over the DP ranks, the plan deals each
global mini-batch (a consecutive run of ppo_mini_batch_size groups) over the ranks, so every optimizer step sees the
same groups whatever the layout. With `balance`, each mini-batch's groups are dealt so that ranks get equal group
counts and nearly equal token totals (see `partition_groups`).

The collective (`to_actor_layout`) moves only the rows each rank needs: one all_gather_object of the rows'
metadata (uid and token count: what the plan needs), then every rank plans alone and the rows go point-to-point in
one all_to_all of pickled per-destination row sets (`dagrl.utils.dist.all_to_all_bytes`; gloo and NCCL both have
all_to_all_single, so no pairwise send/recv ordering is needed). Rank `dst` gets shard d's rows from the member of
rollout-TP group d at its own position in a TP group (`sender`), so a rank takes the rows of its own shard from
itself, and the sending is spread over the TP peers that hold identical copies.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from dagrl.placement import WorldLayout

if TYPE_CHECKING:
    from dagrl.data.batch import Batch


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
        for group, target in zip(order[start : start + dp], lightest):
            bins[target].append(group)
            loads[target] += tokens[group]
    return [sorted(members) for members in bins]


def partition_groups(
    group_tokens: Sequence[int], dp: int, groups_per_mini_batch: int | None = None, balance: bool = False
) -> list[list[int]]:
    """Group indices (into `group_tokens`) for each of `dp` ranks, every rank getting the same number.

    Groups are taken in consecutive chunks of `groups_per_mini_batch` (one global mini-batch each) when that
    divides over `dp`, else as one chunk; each chunk is split over the ranks, contiguously or, with `balance`,
    by token count (`_deal_balanced`). A rank's list is its chunks' groups in chunk order."""
    count = len(group_tokens)
    if dp <= 0 or count % dp:
        raise ValueError(
            f"{count} groups cannot be split evenly over {dp} actor-DP ranks; the number of prompts "
            f"per step (data.train_batch_size) must be a multiple of the actor DP size"
        )
    chunk = groups_per_mini_batch if groups_per_mini_batch and groups_per_mini_batch % dp == 0 else count
    chunk = max(chunk, 1)
    ranks: list[list[int]] = [[] for _ in range(dp)]
    for start in range(0, count, chunk):
        ids = list(range(start, min(start + chunk, count)))
        if balance:
            bins = _deal_balanced(ids, group_tokens, dp)
        else:
            per_rank = len(ids) // dp
            bins = [ids[d * per_rank : (d + 1) * per_rank] for d in range(dp)]
        for rank_groups, members in zip(ranks, bins):
            rank_groups.extend(members)
    return ranks


@dataclass(frozen=True)
class LayoutPlan:
    rows: list[np.ndarray]  # global row indices per actor-DP rank, in the order the rank holds them
    metrics: dict[str, float]


def plan_rows(
    uids: Sequence, row_tokens: Sequence[int], dp: int, groups_per_mini_batch: int | None = None, balance: bool = False
) -> LayoutPlan:
    """Which global rows each actor-DP rank gets (see `partition_groups`), plus verl's `global_seqlen/*`
    balance metrics when `balance` (token totals per rank without and with balancing)."""
    groups = group_rows(uids)
    sizes = {len(rows) for rows in groups}
    if len(sizes) > 1:
        raise ValueError(
            f"groups (rows sharing a uid) have different sizes {sorted(sizes)}; the actor layout "
            f"needs equal groups so that every DP rank gets the same number of rows"
        )
    row_tokens = np.asarray(row_tokens, dtype=np.int64)
    group_tokens = [int(row_tokens[rows].sum()) for rows in groups]
    parts = partition_groups(group_tokens, dp, groups_per_mini_batch, balance)
    rows = [np.concatenate([groups[g] for g in part]) if part else np.zeros(0, dtype=np.int64) for part in parts]
    metrics: dict[str, float] = {}
    if balance:
        plain = [
            sum(group_tokens[g] for g in part) for part in partition_groups(group_tokens, dp, groups_per_mini_batch)
        ]
        balanced = [sum(group_tokens[g] for g in part) for part in parts]
        metrics = {
            "global_seqlen/min": float(min(plain)),
            "global_seqlen/max": float(max(plain)),
            "global_seqlen/minmax_diff": float(max(plain) - min(plain)),
            "global_seqlen/balanced_min": float(min(balanced)),
            "global_seqlen/balanced_max": float(max(balanced)),
            "global_seqlen/mean": float(np.mean(balanced)),
        }
    return LayoutPlan(rows=rows, metrics=metrics)


# ---- routing (pure) --------------------------------------------------------------------------------------
def sender(layout: WorldLayout, shard: int, dst: int) -> int:
    """The rank that sends rollout shard `shard`'s rows to rank `dst`: the member of that shard's rollout-TP group
    at dst's position in its own group (dst itself when dst holds the shard)."""
    return shard * layout.rollout_tp + dst % layout.rollout_tp


def outgoing(layout: WorldLayout, offsets: Sequence[int], rows: Sequence[np.ndarray], me: int) -> list[np.ndarray]:
    """For every rank, the rows of `me`'s rollout shard (indices into it) that `me` sends there, in the order the
    receiver holds them; empty where another rank serves it. `offsets[d]` is shard d's first global row
    (len = shards + 1); `rows[d]` the global rows of actor-DP rank d (`plan_rows`)."""
    shard = layout.rollout_dp_rank(me)
    first, stop = offsets[shard], offsets[shard + 1]
    sends = []
    for dst in range(layout.world_size):
        needed = rows[layout.dp_rank(dst)] if sender(layout, shard, dst) == me else np.zeros(0, dtype=np.int64)
        sends.append(needed[(needed >= first) & (needed < stop)] - first)
    return sends


def arrival_index(offsets: Sequence[int], needed: np.ndarray) -> np.ndarray:
    """The senders' parts arrive in shard order (senders ascend with the shard); selecting their concatenation with
    this index restores the order of `needed` (global rows)."""
    shards = np.searchsorted(np.asarray(offsets), needed, side="right") - 1
    return np.argsort(np.argsort(shards, kind="stable"))


# ---- the collective ---------------------------------------------------------------------------------------
Exchange = Callable[[list[bytes]], list[bytes]]  # payload for each rank -> payload from each rank


def _row_tokens(batch: "Batch") -> list[int]:
    return batch["attention_mask"].sum(-1).tolist()


def to_actor_layout(
    local: "Batch",
    layout: WorldLayout,
    groups_per_mini_batch: int | None = None,
    balance: bool = False,
    exchange: Exchange | None = None,
) -> tuple["Batch", dict[str, float]]:
    """This rank's actor-layout batch (tensors on the device they came from) and the plan's metrics.

    Collective: every rank must call it. `local` is this rank's rollout-layout batch with a `uid` column.
    `exchange` moves the pickled row sets (default: `all_to_all_bytes`; tests wrap it to count what arrives)."""
    import torch.distributed as dist

    from dagrl.data.batch import Batch
    from dagrl.utils.dist import all_to_all_bytes, is_initialized, rank as this_rank

    if layout.world_size == 1 or not is_initialized():
        plan = plan_rows(local["uid"], _row_tokens(local), layout.dp, groups_per_mini_batch, balance)
        return local.select(plan.rows[layout.dp_rank(this_rank())]), plan.metrics
    me = this_rank()
    # the plan needs every row's uid and token count, not its tensors; a rollout-TP group's copies are identical
    meta = (list(local["uid"]), _row_tokens(local)) if layout.is_rollout_tp_leader(me) else None
    gathered: list = [None] * layout.world_size
    dist.all_gather_object(gathered, meta)
    shards = [part for rank, part in enumerate(gathered) if layout.is_rollout_tp_leader(rank)]  # in shard order
    offsets = np.cumsum([0] + [len(uids) for uids, _ in shards])
    plan = plan_rows(
        [uid for uids, _ in shards for uid in uids],
        [t for _, tokens in shards for t in tokens],
        layout.dp,
        groups_per_mini_batch,
        balance,
    )
    sends = outgoing(layout, offsets, plan.rows, me)
    payloads = [
        pickle.dumps(local.select(rows).to("cpu")) if len(rows) and dst != me else b"" for dst, rows in enumerate(sends)
    ]
    received = (exchange or all_to_all_bytes)(payloads)
    devices = {key: value.device for key, value in local.tensors.items()}
    parts = []
    for source, payload in enumerate(received):
        part = local.select(sends[me]) if source == me else pickle.loads(payload) if payload else None
        if part is not None:
            part.tensors = {key: value.to(devices[key]) for key, value in part.tensors.items()}
            parts.append(part)
    out = Batch.concat(parts)
    return out.select(arrival_index(offsets, plan.rows[layout.dp_rank(me)])), plan.metrics
