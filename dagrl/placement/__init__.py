"""Placement, in one home: the actor's Megatron layout over the ranks (`WorldLayout`), the groups it forms
(`megatron_groups`), and which ranks form which pool (`Placement`). Launchers, pre-flight, the data code and
`python3 -m dagrl.plan` use it; it imports neither torch nor megatron."""

from dagrl.placement.groups import ParallelGroups, format_groups, megatron_groups, orthogonal_groups
from dagrl.placement.layout import PARALLEL_SIZE_NAMES, ParallelLayout, WorldLayout
from dagrl.placement.pools import Placement, Pool

__all__ = [
    "ParallelGroups",
    "format_groups",
    "megatron_groups",
    "orthogonal_groups",
    "PARALLEL_SIZE_NAMES",
    "ParallelLayout",
    "WorldLayout",
    "Placement",
    "Pool",
]
