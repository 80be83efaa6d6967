"""Which global ranks form each parallel group of a layout, computed without torch or megatron.

Megatron-Core numbers ranks in the order "tp-cp-ep-dp-pp": the first name varies fastest, so with TP=2 ranks 0
and 1 share a tensor-parallel group. A group of kind X holds the ranks that differ only in their X coordinate(s).
Attention and dense layers use one grid (TP, CP, DP, PP; EP=1); MoE experts use a second grid over the same
ranks (expert-TP, EP, expert-DP, PP; CP folded into expert-DP), as `megatron.core.parallel_state` builds them.
The rollout (vLLM) groups its ranks its own way: consecutive blocks of rollout-TP ranks.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from dagrl.placement.layout import WorldLayout

ORDER = ("tp", "cp", "ep", "dp", "pp")  # Megatron-Core's default order, fastest-varying first


def orthogonal_groups(sizes: dict[str, int], kinds: tuple[str, ...], order: tuple[str, ...] = ORDER) -> list[list[int]]:
    """Rank groups whose members differ only along the dimensions `kinds` of a grid laid out in `order`.

    Groups are listed with the remaining dimensions' coordinates counting up (first dimension fastest), as
    Megatron lists them, and each group's ranks ascend."""
    dims = [sizes.get(name, 1) for name in order]
    strides = [1]
    for size in dims[:-1]:
        strides.append(strides[-1] * size)
    inside = [i for i, name in enumerate(order) if name in kinds]
    outside = [i for i, name in enumerate(order) if name not in kinds]

    def offsets(axes: list[int]) -> list[int]:
        # itertools.product varies its last argument fastest: pass the axes reversed so the first one is fastest
        ranges = [range(dims[i]) for i in reversed(axes)]
        return [sum(c * strides[i] for c, i in zip(coords, reversed(axes))) for coords in itertools.product(*ranges)]

    return [sorted(base + step for step in offsets(inside)) for base in offsets(outside)]


@dataclass(frozen=True)
class ParallelGroups:
    """Every group kind of one Megatron layout (and the rollout's), as lists of global ranks."""

    tp: list[list[int]]
    cp: list[list[int]]
    dp: list[list[int]]
    dp_cp: list[list[int]]  # what the distributed optimizer shards dense state over
    pp: list[list[int]]
    ep: list[list[int]]
    expert_tp: list[list[int]]
    expert_dp: list[list[int]]  # what the distributed optimizer shards expert state over
    rollout_tp: list[list[int]]
    rollout_dp: list[list[int]]

    def attention_rows(self) -> list[tuple[str, list[list[int]]]]:
        """(name, groups) of the attention and dense-layer grid, in the order the plan prints them."""
        return [("TP", self.tp), ("CP", self.cp), ("DP", self.dp), ("PP", self.pp)]

    def expert_rows(self) -> list[tuple[str, list[list[int]]]]:
        """(name, groups) of the MoE experts' grid over the same ranks (PP is the attention's)."""
        return [("EP", self.ep), ("expert-TP", self.expert_tp), ("expert-DP", self.expert_dp)]


def megatron_groups(layout: WorldLayout) -> ParallelGroups:
    """The groups `initialize_model_parallel` builds for this layout, plus the rollout's TP/DP groups."""
    dense = {"tp": layout.tp, "cp": layout.cp, "dp": layout.dp, "pp": layout.pp}
    expert = {"tp": layout.etp, "ep": layout.ep, "dp": layout.expert_dp, "pp": layout.pp}
    rollout = {"tp": layout.rollout_tp, "dp": layout.rollout_dp}
    return ParallelGroups(
        tp=orthogonal_groups(dense, ("tp",)),
        cp=orthogonal_groups(dense, ("cp",)),
        dp=orthogonal_groups(dense, ("dp",)),
        dp_cp=orthogonal_groups(dense, ("dp", "cp")),
        pp=orthogonal_groups(dense, ("pp",)),
        ep=orthogonal_groups(expert, ("ep",)),
        expert_tp=orthogonal_groups(expert, ("tp",)),
        expert_dp=orthogonal_groups(expert, ("dp",)),
        rollout_tp=orthogonal_groups(rollout, ("tp",), ("tp", "dp")),
        rollout_dp=orthogonal_groups(rollout, ("dp",), ("tp", "dp")),
    )


def format_groups(groups: list[list[int]], limit: int = 8) -> str:
    """`[0,1] [2,3] ...`, cut after `limit` groups with a count of the rest (limit <= 0: all)."""
    if len(groups[0]) == 1:
        return "size 1 (not split)"
    shown = groups if limit <= 0 else groups[:limit]
    text = " ".join("[" + ",".join(map(str, group)) + "]" for group in shown)
    if len(shown) < len(groups):
        text += f" ... ({len(groups)} groups of {len(groups[0])})"
    return text
