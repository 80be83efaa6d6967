"""Builds what a run needs from the config: tokenizer, datasets, engines, reward function.

All reading of engine-related config keys happens here, so engines receive explicit specs.
"""
from __future__ import annotations

import logging
import os

import torch

from dagrl.config.tree import Cfg
from dagrl.config.validate import RunShape, layout_from_config
from dagrl.engine.base import MegatronEngineSpec, OptimSpec

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def device_for_rank(local_rank: int) -> torch.device:
    return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")


def load_tokenizer(model_path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(os.path.expanduser(model_path))


def optimizer_steps(cfg: Cfg, total_training_steps: int) -> int:
    actor = cfg.actor_rollout_ref.actor
    return total_training_steps * actor.ppo_epochs * (cfg.data.train_batch_size // actor.ppo_mini_batch_size)


def optim_spec(cfg: Cfg, shape: RunShape, total_training_steps: int) -> OptimSpec:
    optim = cfg.actor_rollout_ref.actor.optim
    total = optimizer_steps(cfg, total_training_steps)
    warmup = optim.lr_warmup_steps
    if warmup is None or warmup < 0:
        warmup = int(optim.lr_warmup_steps_ratio * total)
    return OptimSpec(lr=optim.lr, betas=tuple(optim.betas), weight_decay=optim.weight_decay,
                     clip_grad=shape.grad_clip, lr_warmup_steps=warmup, lr_decay_style=optim.lr_decay_style,
                     min_lr=optim.min_lr, total_training_steps=max(total, 1))


def megatron_spec(cfg: Cfg, shape: RunShape, optim: OptimSpec | None) -> MegatronEngineSpec:
    model = cfg.actor_rollout_ref.model
    megatron = cfg.actor_rollout_ref.actor.megatron
    return MegatronEngineSpec(
        model_path=os.path.expanduser(model.path),
        layout=layout_from_config(megatron),
        optim=optim,
        param_dtype=_DTYPES[megatron.param_dtype],
        use_distributed_optimizer=megatron.use_distributed_optimizer,
        seed=megatron.seed,
        gradient_checkpointing=model.enable_gradient_checkpointing,
        override_transformer_config=megatron.override_transformer_config.to_dict(),
        trainable_top_layers=model.trainable_top_layers if optim is not None else None,
        param_offload=megatron.param_offload,
        grad_offload=megatron.grad_offload,
        optimizer_offload=megatron.optimizer_offload,
    )


def build_actor_and_reference(cfg: Cfg, shape: RunShape, total_training_steps: int):
    """The Megatron actor, and a frozen reference only when a KL term needs one."""
    from dagrl.engine.megatron.engine import MegatronActorEngine

    actor = MegatronActorEngine(megatron_spec(cfg, shape, optim_spec(cfg, shape, total_training_steps)))
    needs_reference = cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward
    reference = MegatronActorEngine(megatron_spec(cfg, shape, optim=None)) if needs_reference else None
    return actor, reference


def build_rollout(cfg: Cfg, tokenizer, device: torch.device):
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.name == "hf":
        from dagrl.engine.rollout.hf import HFRollout

        return HFRollout(os.path.expanduser(cfg.actor_rollout_ref.model.path), eos_token_ids(cfg, tokenizer),
                         pad_token_id(tokenizer), device=device, dtype=_DTYPES[rollout.dtype])
    raise NotImplementedError(f"actor_rollout_ref.rollout.name={rollout.name} is not available in this build")


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
        compute_score = load_custom_reward_fn(custom.path, custom.name)
    reward = cfg.reward_model
    return RewardManager(kind=reward.reward_manager, compute_score=compute_score,
                         reward_kwargs=custom.reward_kwargs.to_dict(), timeout_s=reward.timeout_s,
                         on_error=reward.on_error, overlong_buffer=reward.overlong_buffer.to_dict(),
                         max_response_length=shape.response_length)


def build_dataset(cfg: Cfg, files, tokenizer, shape: RunShape):
    from dagrl.data.dataset import PromptDataset

    data = cfg.data
    return PromptDataset([files] if isinstance(files, str) else list(files), tokenizer,
                         max_prompt_length=shape.prompt_length, truncation=data.truncation,
                         filter_overlong_prompts=data.filter_overlong_prompts, prompt_key=data.prompt_key)
