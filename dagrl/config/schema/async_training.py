"""The async_training section: each key's type, default, range, choices and doc (conf/async_training/default.yaml is
written from it)."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.config.schema.spec import AT_LEAST_ONE, NON_NEGATIVE_INT, POSITIVE_INT, Section, key


@dataclass(frozen=True)
class AsyncTraining(Section):
    """Asynchronous training (verl's async_training section): colocated partial rollout, and separate rollout and
    training pools (actor_rollout_ref.hybrid_engine=false, sized by rollout.* and trainer.*) that meet at a bounded
    buffer."""

    partial_rollout: bool = key(
        False,
        "carry unfinished samples into the next step (prompt + prefix, re-submitted "
        "after the weight sync) instead of waiting for the longest",
    )
    oversample_ratio: float = key(
        1.0,
        "partial_rollout: groups kept in flight per rank, as a multiple of its share of data.train_batch_size (>= 1)",
        AT_LEAST_ONE,
    )
    max_staleness: int = key(
        1,
        "a trained sample's oldest token is at most this many weight versions behind the "
        "update (partial rollout: older groups restart; two pools: the rollout pool runs at "
        "most K+1 batches ahead)",
        NON_NEGATIVE_INT,
    )
    restart_stale: bool = key(
        True,
        "partial rollout: a carried group whose oldest token would be more than "
        "max_staleness versions behind restarts from its prompt (the bound holds for every"
        " token; a response longer than K+1 steps of decoding never finishes); false: it "
        "goes on under newer weights however long it takes (AReaL's and Tinker's choice: "
        "the bound then holds at admission only)",
    )
    trigger_parameter_sync_step: int = key(
        1,
        "steps between weight pushes to the rollout pool (verl's key); colocated runs sync every step (1)",
        POSITIVE_INT,
    )
