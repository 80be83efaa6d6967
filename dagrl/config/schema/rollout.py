"""The rollout section: each key's type, default, range, choices and doc (conf/rollout/default.yaml is written from
it)."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.config.schema.spec import POSITIVE_INT, Section, key


@dataclass(frozen=True)
class RolloutPool(Section):
    """The rollout pool of a run with separate pools (actor_rollout_ref.hybrid_engine=false; verl's fully-async
    `rollout` section). It takes the first rollout.nnodes x rollout.n_gpus_per_node processes of the launch; the
    training pool (trainer.nnodes x trainer.n_gpus_per_node) takes the rest. Ignored by colocated runs."""

    nnodes: int = key(1, "machines of the rollout pool", POSITIVE_INT)
    n_gpus_per_node: int = key(1, "rollout processes per machine (GPUs; CPU slots on a CPU run)", POSITIVE_INT)
