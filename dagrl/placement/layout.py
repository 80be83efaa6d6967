"""The actor's Megatron sizes and the run's ranks: who holds which model shard and which rollout shard.

No torch import: pre-flight and `python3 -m dagrl.plan` use these before any heavy import.
"""

from __future__ import annotations

from dataclasses import dataclass, field


PARALLEL_SIZE_NAMES = (
    "tensor_model_parallel_size",
    "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size",
    "context_parallel_size",
    "expert_model_parallel_size",
    "expert_tensor_parallel_size",
)


@dataclass(frozen=True)
class ParallelLayout:
    """Model-parallel sizes of one Megatron model; DP is whatever the world size leaves (see WorldLayout)."""

    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: int | None = None
    context_parallel_size: int = 1
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: int | None = None
    sequence_parallel: bool = False

    def sizes(self) -> dict[str, int | None]:
        """The parallel sizes under Megatron's own keyword names (initialize_model_parallel, TransformerConfig)."""
        return {name: getattr(self, name) for name in PARALLEL_SIZE_NAMES}

    @property
    def model_parallel_size(self) -> int:
        return self.tensor_model_parallel_size * self.pipeline_model_parallel_size * self.context_parallel_size


@dataclass(frozen=True)
class WorldLayout:
    """A run's ranks: the actor's Megatron layout `model` over `world_size` ranks, and the rollout's TP.

    The one place that derives sizes and rank coordinates from them, for the trainer's batch move
    (dagrl/data/layout.py) and `python3 -m dagrl.plan` alike. Megatron-Core's default order "tp-cp-ep-dp-pp" puts
    rank = tp + TP*(cp + CP*(dp + DP*pp)) on the dense grid, so a rank's DP rank is (rank // (TP*CP)) % DP; EP
    lives on the separate expert grid (expert-TP, EP, expert-DP, PP) and does not change it. The rollout (vLLM)
    groups consecutive blocks of rollout-TP ranks, which hold the same prompts."""

    world_size: int
    model: ParallelLayout = field(default_factory=ParallelLayout)
    rollout_tp: int = 1

    def __post_init__(self) -> None:
        world = self.world_size
        if world % self.rollout_tp:
            raise ValueError(f"world size {world} is not divisible by rollout TP {self.rollout_tp}")
        if world % self.model.model_parallel_size:
            raise ValueError(f"world size {world} is not divisible by TP x PP x CP = {self.tp}x{self.pp}x{self.cp}")
        if world % (self.etp * self.ep * self.pp):
            raise ValueError(
                f"world size {world} is not divisible by expert-TP x EP x PP = {self.etp}x{self.ep}x{self.pp}"
            )

    @classmethod
    def of(
        cls,
        world_size: int,
        rollout_tp: int = 1,
        *,
        tp: int = 1,
        pp: int = 1,
        cp: int = 1,
        ep: int = 1,
        etp: int | None = None,
        vpp: int | None = None,
        sequence_parallel: bool = False,
    ) -> "WorldLayout":
        """The layout from short size names (tests and tools)."""
        return cls(
            world_size,
            ParallelLayout(
                tensor_model_parallel_size=tp,
                pipeline_model_parallel_size=pp,
                virtual_pipeline_model_parallel_size=vpp,
                context_parallel_size=cp,
                expert_model_parallel_size=ep,
                expert_tensor_parallel_size=etp,
                sequence_parallel=sequence_parallel,
            ),
            rollout_tp,
        )

    # Megatron's sizes under short names, defaults resolved.
    @property
    def tp(self) -> int:
        return self.model.tensor_model_parallel_size

    @property
    def pp(self) -> int:
        return self.model.pipeline_model_parallel_size

    @property
    def vpp(self) -> int:
        return self.model.virtual_pipeline_model_parallel_size or 1

    @property
    def cp(self) -> int:
        return self.model.context_parallel_size

    @property
    def ep(self) -> int:
        return self.model.expert_model_parallel_size

    @property
    def etp(self) -> int:
        return self.model.expert_tensor_parallel_size or self.tp

    @property
    def sequence_parallel(self) -> bool:
        return self.model.sequence_parallel and self.tp > 1

    # What the world size leaves.
    @property
    def dp(self) -> int:
        """The actor's data-parallel size."""
        return self.world_size // self.model_parallel_size

    @property
    def expert_dp(self) -> int:
        """What the distributed optimizer shards expert state over (CP folded in, as Megatron does)."""
        return self.world_size // (self.etp * self.ep * self.pp)

    @property
    def model_parallel_size(self) -> int:
        """The ranks that hold one actor-DP shard (TP x PP x CP): a world sum counts each shard this many times."""
        return self.model.model_parallel_size

    @property
    def rollout_dp(self) -> int:
        return self.world_size // self.rollout_tp

    def dp_rank(self, rank: int) -> int:
        """The actor's data-parallel rank of global `rank` (Megatron-Core's default order)."""
        return (rank // (self.tp * self.cp)) % self.dp

    def rollout_dp_rank(self, rank: int) -> int:
        """The rollout shard of global `rank`: consecutive blocks of rollout-TP ranks share one."""
        return rank // self.rollout_tp

    def is_rollout_tp_leader(self, rank: int) -> bool:
        """Whether `rank` is the first of its rollout-TP group: the one that speaks for the group's identical rows."""
        return rank % self.rollout_tp == 0
