"""RunShape: the run's geometry (world, pools, layouts, sequence lengths), derived once by pre-flight
(`validate.preflight`) and read by the trainer, the nodes and `dagrl.plan`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

from dagrl.placement import ParallelLayout, Placement, WorldLayout

if TYPE_CHECKING:
    from dagrl.dag.graph import Graph


@dataclass(frozen=True)
class RunShape:
    """Quantities derived once from the config and the environment."""

    world_size: int
    rollout_tp: int
    prompt_length: int
    response_length: int
    grad_clip: float
    train_rows: int | None  # None: a plan made without the data files (the step count is unknown)
    hf_config: dict
    max_model_len: int = 0  # the rollout's longest sequence (vLLM's max_model_len)
    critic_grad_clip: float | None = None  # critic.grad_clip (or its alias critic.optim.clip_grad)
    parallel: ParallelLayout = field(default_factory=ParallelLayout)  # the actor's Megatron sizes
    pool: str = "colocated"  # this process's pool: colocated, or rollout / train (world_size is the pool's size)
    placement: Placement | None = None
    graph: Graph | None = None  # pre-flight's step graph, the one the trainer runs (None: a shape made without it)

    @property
    def layout(self) -> WorldLayout:
        """This pool's layouts (actor and rollout): the one source of DP sizes and rank coordinates. The training
        pool of two receives every step's whole batch on each rank (as if one rollout-TP group spanned the pool);
        the rollout pool holds no actor, so its actor layout is a single rank's."""
        if self.pool == "train":
            return WorldLayout(self.world_size, self.parallel, rollout_tp=self.world_size)
        if self.pool == "rollout":
            return WorldLayout(self.world_size, ParallelLayout(), self.rollout_tp)
        return WorldLayout(self.world_size, self.parallel, self.rollout_tp)

    @property
    def two_pools(self) -> bool:
        return self.pool != "colocated"

    def in_pool(self, name: str) -> "RunShape":
        """The shape a process of pool `name` ("rollout" or "train") of the same run sees."""
        if self.placement is None or self.placement.is_colocated:
            return self
        return dataclasses.replace(self, pool=name, world_size=self.placement.pool(name).size)
