"""`python3 -m dagrl.plan <the overrides you would give dagrl.main_dag>`: see a run's layout before launching it.

Composes the config exactly as dagrl.main_dag does and runs the same pre-flight checks (with the world size
taken from trainer.nnodes x trainer.n_gpus_per_node, since nothing is launched), then prints which ranks form
each parallel group, how a step's batch is cut into mini- and micro-batches, and a per-GPU memory estimate (on a
CPU run: per process, against the RAM the node's processes share).
With separate pools (actor_rollout_ref.hybrid_engine=false) it shows both: the training pool's groups in global
launch ranks and its memory without a rollout engine, and the rollout pool's TP/DP groups and engine memory.
A bad config prints the trainer's one-line error and exits with code 2. Imports no megatron, and torch only to
resolve a dtype of `auto` of a CPU run (by this machine's CPU, as the trainer would: bfloat16 with bf16
instructions, else float32; a GPU run's `auto` is bfloat16).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from dagrl.config.checks import as_list
from dagrl.config.derived import lora_served_merged
from dagrl.config.schema.lora import megatron_targets
from dagrl.config.tree import Cfg
from dagrl.config.preflight.distillation import teacher_config
from dagrl.config.shape import RunShape
from dagrl.placement import Placement, Pool, WorldLayout
from dagrl.plan.memory import (
    CriticSettings,
    RunSettings,
    StageMemory,
    estimate,
    recompute_from_config,
    rollout_pool_memory,
)
from dagrl.plan.model import ModelShape
from dagrl.placement.groups import ParallelGroups, megatron_groups
from dagrl.plan.schedule import Schedule, needs_reference, step_schedule
from dagrl.utils import precision

H200_GIB = 141.0


@dataclass
class RolloutPool:
    """The rollout pool of a two-pool run: its ranks, rollout TP/DP, groups (global ranks) and engine memory."""

    pool: Pool
    layout: WorldLayout
    groups: ParallelGroups
    memory: StageMemory


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
    placement: Placement | None = None  # set for two pools: then `groups` are the training pool's, in
    rollout_pool: RolloutPool | None = None  # global ranks, and `memory` holds no rollout engine
    cpu_memory_gib: float | None = None  # a CPU run: the RAM a node's processes share (None: a GPU run)
    rollout_quantization: str | None = None  # actor_rollout_ref.rollout.quantization (fp8: plan.fp8's rule)

    @property
    def two_pools(self) -> bool:
        return self.rollout_pool is not None

    @property
    def rank_unit(self) -> str:
        """What one rank runs on: a GPU, or a process of a CPU run."""
        return "GPU" if self.cpu_memory_gib is None else "process"


def offset_groups(groups: ParallelGroups, first_rank: int) -> ParallelGroups:
    """A pool's groups (pool-local ranks 0..N-1) as global launch ranks."""
    return replace(
        groups,
        **{f.name: [[first_rank + r for r in group] for group in getattr(groups, f.name)] for f in fields(groups)},
    )


def critic_settings(cfg: Cfg, schedule: Schedule, actor_model: ModelShape, overrides: dict) -> CriticSettings:
    from dagrl.config.model_dir import read_hf_config

    critic = cfg.critic
    model = ModelShape.from_hf(read_hf_config(critic.model.path)) if critic.model.path else actor_model
    return CriticSettings(
        shape=model,
        micro_batch=schedule.critic.micro_batch,
        micro_batches=schedule.critic.micro_batches_per_mini_batch,
        forward_micro_batch=schedule.critic.forward_micro_batch,
        recompute=recompute_from_config(bool(critic.model.enable_gradient_checkpointing), overrides),
        param_offload=bool(critic.megatron.param_offload),
        grad_offload=bool(critic.megatron.grad_offload),
        optimizer_offload=bool(critic.megatron.optimizer_offload),
        lora_rank=int(critic.model.lora.rank),
        lora_targets=megatron_targets(as_list(critic.model.lora.target_modules)),
    )


def teacher_settings(cfg: Cfg) -> dict:
    """dag=opd's teacher for RunSettings: its shape (from its config.json), offload and forward micro-batch."""
    config = teacher_config(cfg)
    if config is None:
        return {}
    teacher = cfg.distillation.teacher_model
    return {
        "teacher": ModelShape.from_hf(config),
        "teacher_param_offload": bool(teacher.param_offload),
        "teacher_log_prob_micro_batch": teacher.log_prob_micro_batch_size_per_gpu,
    }


def make_plan(cfg: Cfg, shape: RunShape, gpu_memory_gib: float = H200_GIB, cpu_memory_gib: float | None = None) -> Plan:
    """The plan of a config that passed pre-flight (`shape` is what preflight returned; with two pools, that of
    either pool); `cpu_memory_gib`: a CPU run on nodes of that much memory."""
    shape = shape.in_pool("train")  # colocated: itself
    megatron = cfg.actor_rollout_ref.actor.megatron
    rollout = cfg.actor_rollout_ref.rollout
    model = ModelShape.from_hf(shape.hf_config)
    layout = shape.layout
    groups = megatron_groups(layout)
    schedule = step_schedule(cfg, shape)
    overrides = megatron.override_transformer_config.to_dict()
    quantization = rollout.get("quantization")  # None where the config has no such key
    # a GPU plan (vLLM's always) resolves `auto` as its GPUs do; a CPU plan as this machine's CPU does
    machine = precision.GPU if cpu_memory_gib is None else None
    run = RunSettings(
        bf16=precision.resolve(megatron.param_dtype, machine) == "bfloat16",
        distributed_optimizer=bool(megatron.use_distributed_optimizer),
        param_offload=bool(megatron.param_offload),
        grad_offload=bool(megatron.grad_offload),
        optimizer_offload=bool(megatron.optimizer_offload),
        ref_param_offload=bool(cfg.actor_rollout_ref.ref.megatron.param_offload),
        trainable_top_layers=cfg.actor_rollout_ref.model.trainable_top_layers,
        lora_rank=int(cfg.actor_rollout_ref.model.lora.rank),
        lora_targets=megatron_targets(as_list(cfg.actor_rollout_ref.model.lora.target_modules)),
        lora_merged=lora_served_merged(cfg),
        recompute=recompute_from_config(bool(cfg.actor_rollout_ref.model.enable_gradient_checkpointing), overrides),
        sequence_length=shape.prompt_length + shape.response_length,
        response_length=shape.response_length,
        micro_batch=schedule.micro_batch,
        micro_batches=schedule.micro_batches_per_mini_batch,
        old_log_prob_micro_batch=schedule.old_log_prob_micro_batch,
        ref_log_prob_micro_batch=schedule.ref_log_prob_micro_batch,
        reference=needs_reference(cfg),
        rollout=rollout.name,
        rollout_bf16=precision.resolve(rollout.dtype, machine) == "bfloat16",
        gpu_memory_utilization=float(rollout.gpu_memory_utilization),
        free_cache_engine=bool(rollout.free_cache_engine),
        gpu_memory_gib=gpu_memory_gib,
        critic=critic_settings(cfg, schedule, model, overrides) if schedule.critic else None,
        **teacher_settings(cfg),
    )
    if not shape.two_pools:
        return Plan(
            nnodes=cfg.trainer.nnodes,
            gpus_per_node=cfg.trainer.n_gpus_per_node,
            model=model,
            layout=layout,
            groups=groups,
            schedule=schedule,
            run=run,
            memory=estimate(model, layout, run),
            rollout_name=rollout.name,
            cpu_memory_gib=cpu_memory_gib,
            rollout_quantization=quantization,
        )
    place = shape.placement
    rollout_pool, train_pool = place.pool("rollout"), place.pool("train")
    rollout_layout = shape.in_pool("rollout").layout
    train_run = replace(run, rollout=None)  # the training GPUs hold no rollout engine
    return Plan(
        nnodes=cfg.trainer.nnodes,
        gpus_per_node=cfg.trainer.n_gpus_per_node,
        model=model,
        layout=layout,
        groups=offset_groups(groups, train_pool.first_rank),
        schedule=schedule,
        run=train_run,
        memory=estimate(model, layout, train_run),
        rollout_name=rollout.name,
        placement=place,
        cpu_memory_gib=cpu_memory_gib,
        rollout_quantization=quantization,
        rollout_pool=RolloutPool(
            pool=rollout_pool,
            layout=rollout_layout,
            groups=offset_groups(megatron_groups(rollout_layout), rollout_pool.first_rank),
            memory=rollout_pool_memory(model, rollout_layout, run),
        ),
    )
