"""Which global ranks form which pool, and the environment each process sees inside its pool.

Colocated (today's default, verl's `hybrid_engine=true`): one pool of every rank trains and generates. Two pools:
the rollout pool takes the first `rollout_ranks` ranks and the training pool the rest; each initialises its own
default process group with pool-local RANK / LOCAL_RANK / WORLD_SIZE, because vLLM's external launcher and
Megatron's `initialize_model_parallel` both span the whole default group (a shared world hangs one of them).
Launchers (torchrun, Ray) start `world_size` processes; each asks `Placement.pool_of(rank)` where it belongs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pool:
    name: str  # "colocated", "rollout" or "train"
    first_rank: int  # global rank of the pool's rank 0
    size: int
    per_node: int  # processes of this pool on one node (its n_gpus_per_node)

    @property
    def ranks(self) -> range:
        return range(self.first_rank, self.first_rank + self.size)

    def local_env(self, rank: int) -> dict[str, str]:
        """The torchrun-style variables a process of global `rank` sees inside this pool."""
        if rank not in self.ranks:
            raise ValueError(
                f"rank {rank} is not in the {self.name} pool (ranks {self.first_rank}.."
                f"{self.first_rank + self.size - 1})"
            )
        local = rank - self.first_rank
        return {
            "RANK": str(local),
            "WORLD_SIZE": str(self.size),
            "LOCAL_RANK": str(local % self.per_node),
            "LOCAL_WORLD_SIZE": str(min(self.per_node, self.size)),
            "DAGRL_POOL": self.name,
        }


@dataclass(frozen=True)
class Placement:
    """The run's pools: `colocated` alone, or `rollout` then `train` on separate ranks."""

    pools: tuple[Pool, ...]

    @classmethod
    def colocated(cls, nnodes: int, per_node: int) -> "Placement":
        return cls((Pool("colocated", 0, nnodes * per_node, per_node),))

    @classmethod
    def split(cls, rollout_nodes: int, rollout_per_node: int, train_nodes: int, train_per_node: int) -> "Placement":
        rollout = rollout_nodes * rollout_per_node
        return cls(
            (
                Pool("rollout", 0, rollout, rollout_per_node),
                Pool("train", rollout, train_nodes * train_per_node, train_per_node),
            )
        )

    @property
    def world_size(self) -> int:
        return sum(pool.size for pool in self.pools)

    @property
    def is_colocated(self) -> bool:
        return len(self.pools) == 1

    def pool(self, name: str) -> Pool:
        """The pool that does `name` ("rollout" or "train"); the colocated pool does both."""
        for pool in self.pools:
            if pool.name in (name, "colocated"):
                return pool
        raise KeyError(f"no {name} pool in {[pool.name for pool in self.pools]}")

    def pool_of(self, rank: int) -> Pool:
        for pool in self.pools:
            if rank in pool.ranks:
                return pool
        raise ValueError(f"rank {rank} is outside the {self.world_size} ranks of this placement")
