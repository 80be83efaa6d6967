"""Builds what a run needs from the config: tokenizer, datasets, engines, reward function.

All reading of engine-related config keys happens here, so engines receive explicit specs.
"""

from __future__ import annotations

import dataclasses
import logging
import os

import torch

from dagrl.config.checks import as_list
from dagrl.config.derived import lora_served_merged, needs_reference, optimizer_steps, trained_section
from dagrl.config.tree import Cfg
from dagrl.config.shape import RunShape
from dagrl.engine.base import MegatronEngineSpec, OptimSpec
from dagrl.utils import precision

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def run_dtype(cfg: Cfg, key: str) -> str:
    """The dtype name `key` (precision.KEYS) resolves to on this machine; the first call of a process logs what
    `auto` chose on a CPU and warns of bf16 set on a CPU without bf16 instructions (rank 0)."""
    values = {
        precision.PARAM_DTYPE: cfg.actor_rollout_ref.actor.megatron.param_dtype,
        precision.ROLLOUT_DTYPE: cfg.actor_rollout_ref.rollout.dtype,
    }
    if os.environ.get("RANK", "0") == "0":
        precision.announce_once(*precision.startup_lines(values))
    return precision.resolve(values[key])


def device_for_rank(local_rank: int) -> torch.device:
    return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")


def load_tokenizer(model_path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.path.expanduser(model_path))


def optim_spec(cfg: Cfg, shape: RunShape, total_training_steps: int, role: str = "actor") -> OptimSpec:
    """The optimizer and LR schedule of the actor or the critic, from their `optim` sections."""
    optim = trained_section(cfg, role).optim
    total = optimizer_steps(cfg, total_training_steps, role)
    warmup = optim.lr_warmup_steps
    if warmup is None or warmup < 0:
        warmup = int(optim.lr_warmup_steps_ratio * total)
    # verl's FSDP names, checked against dagrl's in pre-flight: warmup_style replaces lr_decay_style, min_lr_ratio
    # gives min_lr as a fraction of lr
    style = optim.warmup_style or optim.lr_decay_style
    min_lr = optim.min_lr_ratio * optim.lr if optim.min_lr_ratio is not None else optim.min_lr
    return OptimSpec(
        lr=optim.lr,
        betas=tuple(optim.betas),
        weight_decay=optim.weight_decay,
        clip_grad=shape.critic_grad_clip if role == "critic" else shape.grad_clip,
        lr_warmup_steps=warmup,
        lr_decay_style=style,
        min_lr=min_lr,
        total_training_steps=max(total, 1),
    )


def megatron_spec(cfg: Cfg, shape: RunShape, optim: OptimSpec | None) -> MegatronEngineSpec:
    model = cfg.actor_rollout_ref.model
    megatron = cfg.actor_rollout_ref.actor.megatron
    return MegatronEngineSpec(
        model_path=os.path.expanduser(model.path),
        layout=shape.parallel,
        optim=optim,
        param_dtype=_DTYPES[run_dtype(cfg, precision.PARAM_DTYPE)],
        use_distributed_optimizer=megatron.use_distributed_optimizer,
        seed=megatron.seed,
        gradient_checkpointing=model.enable_gradient_checkpointing,
        override_transformer_config=megatron.override_transformer_config.to_dict(),
        trainable_top_layers=model.trainable_top_layers if optim is not None else None,
        param_offload=megatron.param_offload,
        grad_offload=megatron.grad_offload,
        optimizer_offload=megatron.optimizer_offload,
        remove_padding=model.use_remove_padding,
        fp32_lm_head=model.fp32_lm_head,
        dist_checkpoint_path=os.path.expanduser(megatron.dist_checkpointing_path)
        if megatron.use_dist_checkpointing
        else None,
        lora=lora_spec(model.lora, merged=lora_served_merged(cfg)) if optim is not None else None,
    )


def lora_spec(lora, merged: bool = False):
    """The adapters a LoRA section declares (actor_rollout_ref.model.lora, critic.model.lora); None at rank 0 (full
    fine-tuning). `merged`: the rollout serves the merge (derived.lora_served_merged; never the critic's: nothing
    of it is synced)."""
    from dagrl.config.schema.lora import megatron_targets
    from dagrl.engine.lora import LoraSpec

    if lora.rank == 0:
        return None
    targets = megatron_targets(as_list(lora.target_modules))
    return LoraSpec(lora.rank, float(lora.alpha), float(lora.dropout), targets, merged=merged)


def build_actor_and_reference(cfg: Cfg, shape: RunShape, total_training_steps: int):
    """The Megatron actor, and a frozen reference only when a KL term needs one."""
    from dagrl.engine.megatron import compat
    from dagrl.engine.megatron.actor import MegatronActorEngine

    compat.import_megatron(keep_wandb="wandb" in as_list(cfg.trainer.logger))
    contents = cfg.actor_rollout_ref.actor.checkpoint
    actor = MegatronActorEngine(
        dataclasses.replace(
            megatron_spec(cfg, shape, optim_spec(cfg, shape, total_training_steps)),
            save_contents=tuple(as_list(contents.save_contents)),
            load_contents=tuple(as_list(contents.load_contents)),
            router_replay=cfg.actor_rollout_ref.actor.router_replay.mode != "disabled"
            or cfg.actor_rollout_ref.rollout.enable_rollout_routing_replay,
        )
    )
    reference = None
    if needs_reference(cfg) and actor.spec.lora is not None:  # the base with adapters off: no second copy
        from dagrl.engine.megatron.lora import AdaptersOffReference

        reference = AdaptersOffReference(actor)
    elif needs_reference(cfg):  # frozen: only its parameters can be offloaded, under its own flag
        reference = MegatronActorEngine(
            dataclasses.replace(
                megatron_spec(cfg, shape, optim=None),
                param_offload=cfg.actor_rollout_ref.ref.megatron.param_offload,
                grad_offload=False,
                optimizer_offload=False,
            )
        )
    return actor, reference


def build_teacher(cfg: Cfg, shape: RunShape):
    """The frozen distillation teacher: the actor's layout and dtype, its own weights and parameter offload."""
    from dagrl.engine.megatron.actor import MegatronActorEngine

    teacher = cfg.distillation.teacher_model
    return MegatronActorEngine(
        dataclasses.replace(
            megatron_spec(cfg, shape, optim=None),
            model_path=os.path.expanduser(teacher.model_path),
            param_offload=teacher.param_offload,
            grad_offload=False,
            optimizer_offload=False,
            trainable_top_layers=None,
            dist_checkpoint_path=None,
        )
    )


def build_critic(cfg: Cfg, shape: RunShape, total_training_steps: int):
    """The Megatron critic: the actor's layout, dtype and optimizer kind, with critic.* for the rest."""
    from dagrl.engine.megatron.critic import MegatronCriticEngine

    critic = cfg.critic
    spec = megatron_spec(cfg, shape, optim_spec(cfg, shape, total_training_steps, role="critic"))
    return MegatronCriticEngine(
        dataclasses.replace(
            spec,
            model_path=os.path.expanduser(critic.model.path) if critic.model.path else spec.model_path,
            seed=critic.megatron.seed,
            gradient_checkpointing=critic.model.enable_gradient_checkpointing,
            remove_padding=critic.model.use_remove_padding,
            fp32_lm_head=False,  # a value head, not an LM head
            trainable_top_layers=None,
            lora=lora_spec(critic.model.lora),  # its own adapters; the value head trains beside them
            dist_checkpoint_path=None,
            param_offload=critic.megatron.param_offload,
            grad_offload=critic.megatron.grad_offload,
            optimizer_offload=critic.megatron.optimizer_offload,
        )
    )


def build_rollout(cfg: Cfg, shape: RunShape, tokenizer, device: torch.device):
    """The engine actor_rollout_ref.rollout.name names, built by its entry of ROLLOUT_ENGINES
    (dagrl/engine/rollout/registry.py: hf and vllm, and any a trainer.plugins module registers)."""
    from dagrl.engine.rollout.registry import ROLLOUT_ENGINES, RolloutSetup

    setup = RolloutSetup(
        cfg,
        shape,
        tokenizer,
        device,
        model_path=os.path.expanduser(cfg.actor_rollout_ref.model.path),
        eos_token_ids=eos_token_ids(cfg, tokenizer),
        pad_token_id=pad_token_id(tokenizer),
        dtype=run_dtype(cfg, precision.ROLLOUT_DTYPE),
    )
    return ROLLOUT_ENGINES[cfg.actor_rollout_ref.rollout.name](setup)


def eos_token_ids(cfg: Cfg, tokenizer) -> list[int]:
    """Every id that ends a response: the tokenizer's eos plus the model's generation_config eos ids."""
    from transformers import GenerationConfig

    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    try:
        generation = GenerationConfig.from_pretrained(os.path.expanduser(cfg.actor_rollout_ref.model.path))
    except OSError:  # no generation_config.json: the tokenizer's eos is all there is
        generation = None
    if generation is not None and generation.eos_token_id is not None:
        extra = generation.eos_token_id
        ids.update(extra if isinstance(extra, list) else [extra])
    return sorted(ids)


def pad_token_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def build_reward_fn(cfg: Cfg, shape: RunShape):
    from dagrl.reward.manager import RewardManager

    custom = cfg.custom_reward_function
    compute_score = None
    if custom.path:
        from dagrl.reward.custom import load_custom_reward_fn

        compute_score = load_custom_reward_fn(custom.path, custom.name, custom.reward_kwargs.to_dict())
    reward = cfg.reward_model
    return RewardManager(
        kind=reward.reward_manager,
        compute_score=compute_score,
        reward_kwargs=custom.reward_kwargs.to_dict(),
        timeout_s=reward.timeout_s,
        on_error=reward.on_error,
        overlong_buffer=reward.overlong_buffer.to_dict(),
        max_response_length=shape.response_length,
    )


def build_dataset(cfg: Cfg, files, tokenizer, shape: RunShape, tools: list[dict] | None = None):
    """The prompts of `files`, memory-mapped on every rank; the overlong-prompt scan (filter_overlong_prompts, or
    with data.truncation=error the check that no prompt is too long) is split over all ranks.
    `tools`: the schemas every prompt offers (multi-turn)."""
    from dagrl.data.dataset import PromptDataset
    from dagrl.utils import dist

    def all_gather(local):
        gathered = [None] * dist.world_size()
        torch.distributed.all_gather_object(gathered, local)
        return gathered

    data = cfg.data
    cache_dir = data.cache_dir or os.path.join(os.path.expanduser(cfg.trainer.default_local_dir), "data_cache")
    return PromptDataset(
        [files] if isinstance(files, str) else list(files),
        tokenizer,
        max_prompt_length=shape.prompt_length,
        truncation=data.truncation,
        filter_overlong_prompts=data.filter_overlong_prompts,
        prompt_key=data.prompt_key,
        cache_dir=cache_dir,
        rank=dist.rank(),
        world_size=dist.world_size(),
        all_gather=all_gather,
        tools=tools,
        check_overlong=True,
    )
