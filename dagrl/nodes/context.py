"""What every node receives: engines, config and the step, plus the node's own config overrides."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from dagrl.config.shape import RunShape
from dagrl.config.schema.root import Config
from dagrl.engine.base import ActorEngine, CriticEngine
from dagrl.engine.rollout.interface import RolloutEngine
from dagrl.plan.schedule import Schedule, step_schedule
from dagrl.utils.dist import data_parallel_sums


@dataclass
class WeightVersions:
    """Counts actor updates and what the rollout last loaded, so weights are synced only when stale."""

    actor: int = 0
    rollout: int = -1


@dataclass
class RolloutWake:
    """The rollout engine between the weight_sync node, which wakes it, and the node that generates and puts it back
    to sleep (nodes/common.py): the seconds of the choreography so far, None while it sleeps."""

    switch_s: float | None = None


@dataclass
class StepContext:
    cfg: Config  # the run's config, typed (dagrl/config/schema/): built once by the trainer
    shape: RunShape
    actor: ActorEngine  # the rollout pool of two has none: a relay of the pushed weights stands in
    rollout: RolloutEngine
    reference: ActorEngine | None  # without optimizer; None when no KL term needs it
    reward_fn: Any  # RewardManager
    tokenizer: Any
    kl_ctrl: Any  # KLController for KL-in-reward
    versions: WeightVersions
    critic: CriticEngine | None = None  # when the graph has critic nodes
    teacher: ActorEngine | None = None  # the frozen distillation teacher, when the graph has a teacher node
    rank: int = 0
    step: int = 0
    node_config: dict[str, Any] = field(default_factory=dict)
    # (step, round) -> this rank's rollout shard of the next global prompt batch from the seeded, checkpointed
    # sampler; nodes that need more prompts in a step (dynamic sampling) call it with round 1, 2, ...
    draw_prompts: Callable[[int, int], Any] | None = None
    # async_training.partial_rollout: this rank's partial-rollout buffer, the groups carried between steps
    # (nodes/partial_rollout.py)
    partial: Any | None = None
    # the weight version the update that trains this step's batch starts from: the staleness bound counts from it.
    # None: the actor's current version (colocated); the rollout pool of two sets step - 1 (trainer/pools/rollout.py)
    update_base: int | None = None
    # actor_rollout_ref.rollout.multi_turn: the loop every rollout (and validation) runs (dagrl/agent/loop.py)
    agent: Any | None = None
    # the rollout pool of two with partial rollout: takes weight pushes between scheduling steps, mid-batch
    # (trainer/pools/rollout.py Receiver: poll, load)
    weight_updates: Any | None = None
    # ledger uid (column `ledger_uid`, "<epoch>:<dataset index>") -> why a node dropped that prompt this step
    # (dynamic sampling: zero_variance, surplus); the trainer resets it every step and writes it to the prompt ledger
    dropped: dict[str, str] = field(default_factory=dict)
    # shared by every node of a step (run_graph gives each node a copy of this context, not of this field)
    wake: RolloutWake = field(default_factory=RolloutWake)

    @functools.cached_property
    def schedule(self) -> Schedule:
        """How a step's batch is cut into mini- and micro-batches: the one schedule, which `dagrl.plan` prints."""
        return step_schedule(self.cfg, self.shape)

    def dp_sums(self, values: torch.Tensor) -> torch.Tensor:
        """`values` (a small tensor) summed element-wise over the actor's data-parallel ranks, in float64: each DP
        shard counted once, whatever the model-parallel layout (one all-reduce; every rank calls it)."""
        return data_parallel_sums(values, self.shape.layout.model_parallel_size)
