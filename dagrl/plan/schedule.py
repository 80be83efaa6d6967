"""How one training step's batch is cut: per rollout rank, per actor rank, into mini- and micro-batches.

One schedule for the plan and the run: `dagrl.plan` prints it, and the nodes cut their batches by it
(`StepContext.schedule`). The rollout node generates `rollout.n` responses for each prompt of its
rollout-DP slice; `nodes/actor.py::update_actor` splits each actor rank's responses into `ppo_mini_batch_size x n /
actor-DP` rows per optimizer step for `ppo_epochs` passes, and the engine runs micro-batches of
`ppo_micro_batch_size_per_gpu` rows through Megatron's pipeline schedule; the log-prob nodes run micro-batches of
their own sizes. Pre-flight has already checked that every division here is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.config.derived import needs_reference, skips_old_log_prob, total_steps
from dagrl.config.tree import Cfg
from dagrl.config.shape import RunShape
from dagrl.placement import WorldLayout


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class CriticSchedule:
    """The PPO critic's own cut of the step (critic.*)."""

    mini_batches: int
    ppo_epochs: int
    mini_batch_rows_per_rank: int
    micro_batch: int
    forward_micro_batch: int

    @property
    def micro_batches_per_mini_batch(self) -> int:
        return self.mini_batch_rows_per_rank // self.micro_batch


@dataclass(frozen=True)
class Schedule:
    prompts: int  # data.train_batch_size
    n: int  # responses per prompt
    layout: WorldLayout  # rollout DP, actor DP, PP and VPP
    mini_batches: int  # optimizer steps per PPO epoch
    ppo_epochs: int
    mini_batch_rows_per_rank: int  # responses per optimizer step on one actor rank
    micro_batch: int
    old_log_prob_micro_batch: int | None  # None: skipped (one optimizer step per batch: update's own log-probs)
    ref_log_prob_micro_batch: int | None  # None: no reference model (no KL term)
    steps_per_epoch: int | None  # None: planned without the data files
    total_steps: int | None  # None: that, and no trainer.total_training_steps
    critic: CriticSchedule | None = None  # None: the graph has no critic node

    @property
    def responses(self) -> int:
        return self.prompts * self.n

    @property
    def prompts_per_rollout_rank(self) -> int:
        return self.prompts // self.layout.rollout_dp

    @property
    def responses_per_actor_rank(self) -> int:
        return self.responses // self.layout.dp

    @property
    def optimizer_steps(self) -> int:
        return self.mini_batches * self.ppo_epochs

    @property
    def micro_batches_per_mini_batch(self) -> int:
        return self.mini_batch_rows_per_rank // self.micro_batch

    def log_prob_micro_batches(self, size: int | None) -> int:
        return 0 if size is None else _ceil_div(self.responses_per_actor_rank, size)

    @property
    def pipeline_bubble(self) -> float:
        """Idle share of a 1F1B (interleaved: / VPP) pipeline step: (PP - 1) / (VPP x M + PP - 1)."""
        pp, vpp = self.layout.pp, self.layout.vpp
        if pp == 1:
            return 0.0
        return (pp - 1) / (vpp * self.micro_batches_per_mini_batch + pp - 1)


def critic_schedule(cfg: Cfg, shape: RunShape) -> CriticSchedule:
    critic = cfg.critic
    return CriticSchedule(
        mini_batches=cfg.data.train_batch_size // critic.ppo_mini_batch_size,
        ppo_epochs=critic.ppo_epochs,
        mini_batch_rows_per_rank=critic.ppo_mini_batch_size * cfg.actor_rollout_ref.rollout.n // shape.layout.dp,
        micro_batch=critic.ppo_micro_batch_size_per_gpu,
        forward_micro_batch=critic.forward_micro_batch_size_per_gpu,
    )


def step_schedule(cfg: Cfg, shape: RunShape) -> Schedule:
    from dagrl.config.preflight.graph import graph_roles

    actor = cfg.actor_rollout_ref.actor
    n = cfg.actor_rollout_ref.rollout.n
    prompts = cfg.data.train_batch_size
    steps_per_epoch = None if shape.train_rows is None else shape.train_rows // prompts
    return Schedule(
        prompts=prompts,
        n=n,
        layout=shape.layout,
        mini_batches=prompts // actor.ppo_mini_batch_size,
        ppo_epochs=actor.ppo_epochs,
        mini_batch_rows_per_rank=actor.ppo_mini_batch_size * n // shape.layout.dp,
        micro_batch=actor.ppo_micro_batch_size_per_gpu,
        old_log_prob_micro_batch=None
        if skips_old_log_prob(cfg)
        else cfg.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu,
        ref_log_prob_micro_batch=cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu
        if needs_reference(cfg)
        else None,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps(cfg, shape.train_rows),
        critic=critic_schedule(cfg, shape) if "critic" in graph_roles(cfg) else None,
    )
