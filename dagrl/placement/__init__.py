"""Placement, in one home: the actor's Megatron layout over the ranks (`WorldLayout`), the groups it forms
(`megatron_groups`), and which ranks form which pool (`Placement`). Launchers, pre-flight, the data code and
`python3 -m dagrl.plan` use it; it imports neither torch nor megatron."""
from dagrl.placement.groups import ParallelGroups, format_groups, megatron_groups, orthogonal_groups  # noqa: F401
from dagrl.placement.layout import PARALLEL_SIZE_NAMES, ParallelLayout, WorldLayout  # noqa: F401
from dagrl.placement.pools import Placement, Pool  # noqa: F401
