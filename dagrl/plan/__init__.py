"""`python3 -m dagrl.plan <the overrides you would give dagrl.main_dag>`: see a run's layout before launching it.

Composes the config exactly as dagrl.main_dag does and runs the same pre-flight checks (with the world size
taken from trainer.nnodes x trainer.n_gpus_per_node, since nothing is launched), then prints which ranks form
each parallel group, how a step's batch is cut into mini- and micro-batches, and a per-GPU memory estimate.
A bad config prints the trainer's one-line error and exits with code 2. Imports neither torch nor megatron.
"""
from __future__ import annotations

from dataclasses import dataclass

from dagrl.config.tree import Cfg
from dagrl.config.validate import RunShape
from dagrl.placement import WorldLayout
from dagrl.plan.memory import CriticSettings, RunSettings, StageMemory, estimate, recompute_from_config
from dagrl.plan.model import ModelShape
from dagrl.placement.groups import ParallelGroups, megatron_groups
from dagrl.plan.schedule import Schedule, needs_reference, step_schedule

H200_GIB = 141.0


@dataclass
class Plan:
    nnodes: int
    gpus_per_node: int
    model: ModelShape
    layout: WorldLayout
    groups: ParallelGroups
    schedule: Schedule
    run: RunSettings
    memory: list[StageMemory]
    rollout_name: str


def critic_settings(cfg: Cfg, schedule: Schedule, actor_model: ModelShape, overrides: dict) -> CriticSettings:
    from dagrl.config.validate import read_hf_config

    critic = cfg.critic
    model = ModelShape.from_hf(read_hf_config(critic.model.path)) if critic.model.path else actor_model
    return CriticSettings(
        shape=model, micro_batch=schedule.critic.micro_batch,
        micro_batches=schedule.critic.micro_batches_per_mini_batch,
        forward_micro_batch=schedule.critic.forward_micro_batch,
        recompute=recompute_from_config(bool(critic.model.enable_gradient_checkpointing), overrides),
        param_offload=bool(critic.megatron.param_offload), grad_offload=bool(critic.megatron.grad_offload),
        optimizer_offload=bool(critic.megatron.optimizer_offload))


def make_plan(cfg: Cfg, shape: RunShape, gpu_memory_gib: float = H200_GIB) -> Plan:
    """The plan of a config that passed pre-flight (`shape` is what preflight returned)."""
    megatron = cfg.actor_rollout_ref.actor.megatron
    rollout = cfg.actor_rollout_ref.rollout
    model = ModelShape.from_hf(shape.hf_config)
    layout = shape.layout
    groups = megatron_groups(layout)
    schedule = step_schedule(cfg, shape)
    overrides = megatron.override_transformer_config.to_dict()
    run = RunSettings(
        bf16=megatron.param_dtype in ("bfloat16", "bf16"),
        distributed_optimizer=bool(megatron.use_distributed_optimizer),
        param_offload=bool(megatron.param_offload), grad_offload=bool(megatron.grad_offload),
        optimizer_offload=bool(megatron.optimizer_offload),
        ref_param_offload=bool(cfg.actor_rollout_ref.ref.megatron.param_offload),
        trainable_top_layers=cfg.actor_rollout_ref.model.trainable_top_layers,
        recompute=recompute_from_config(bool(cfg.actor_rollout_ref.model.enable_gradient_checkpointing), overrides),
        sequence_length=shape.prompt_length + shape.response_length, response_length=shape.response_length,
        micro_batch=schedule.micro_batch, micro_batches=schedule.micro_batches_per_mini_batch,
        old_log_prob_micro_batch=schedule.old_log_prob_micro_batch,
        ref_log_prob_micro_batch=schedule.ref_log_prob_micro_batch,
        reference=needs_reference(cfg), rollout=rollout.name, rollout_bf16=rollout.dtype in ("bfloat16", "bf16"),
        gpu_memory_utilization=float(rollout.gpu_memory_utilization),
        free_cache_engine=bool(rollout.free_cache_engine), gpu_memory_gib=gpu_memory_gib,
        critic=critic_settings(cfg, schedule, model, overrides) if schedule.critic else None)
    return Plan(nnodes=cfg.trainer.nnodes, gpus_per_node=cfg.trainer.n_gpus_per_node, model=model, layout=layout,
                groups=groups, schedule=schedule, run=run, memory=estimate(model, layout, run),
                rollout_name=rollout.name)
