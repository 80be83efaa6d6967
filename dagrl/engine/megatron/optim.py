"""The trainable side of a Megatron engine: which parameters train, DDP around each model chunk (grad buffers, the
grad reduction overlapped with backward), Megatron's Adam with its LR schedule, and one optimizer step guarded
against a non-finite grad norm."""

from __future__ import annotations

import logging
import math
from typing import Any

import torch

from dagrl.engine.base import MegatronEngineSpec
from dagrl.engine.megatron import compat

logger = logging.getLogger(__name__)


def set_trainable(modules: list[torch.nn.Module], spec: MegatronEngineSpec, num_layers: int) -> None:
    """Every parameter frozen for a frozen engine (`spec.optim` None); with `trainable_top_layers`, only the top
    decoder layers and the final norm train."""
    top = spec.trainable_top_layers
    frozen = spec.optim is None
    first_trainable = num_layers - (top or 0)
    for module in modules:
        for name, param in module.named_parameters():
            if frozen:
                param.requires_grad_(False)
            elif top is not None:
                layer = _global_layer(module, name)
                trainable = (layer is not None and layer >= first_trainable) or name == "decoder.final_layernorm.weight"
                param.requires_grad_(trainable)


PARAMETER_FREE_RECOMPUTE = {"core_attn", "moe_act"}  # recompute_modules whose spans hold no weights


def recompute_reaches_frozen_inputs(modules: list[torch.nn.Module], tf_config: Any) -> None:
    """Megatron's activation recompute is reentrant: a recomputed span (full recompute's layers, or a module that
    selective recompute names) gives its parameters gradients only when one of its inputs needs a gradient. Under a
    frozen embedding (trainable_top_layers, LoRA's frozen base) no span's input might, and the trainable layers
    (every adapter, or the lowest trained layer and with it all above) got none; so there the embedding's output is
    marked as needing one. The backward then also runs through the frozen layers below (their input gradients
    only), which recompute-free training skips. Selective recompute of parameter-free parts alone (core attention,
    Megatron's default, or the MoE activation) needs no mark."""
    granularity, parts = tf_config.recompute_granularity, set(tf_config.recompute_modules or ["core_attn"])
    if granularity is None or (granularity == "selective" and parts <= PARAMETER_FREE_RECOMPUTE):
        return
    for module in modules:
        embedding = getattr(module, "embedding", None)  # None on a pipeline stage after the first
        if embedding is not None and not any(param.requires_grad for param in embedding.parameters()):
            embedding.register_forward_hook(_needs_grad)


def _needs_grad(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
    return output.requires_grad_() if torch.is_grad_enabled() else output


def _global_layer(module: torch.nn.Module, name: str) -> int | None:
    parts = name.split(".")
    if parts[:2] != ["decoder", "layers"]:
        return None
    return module.decoder.layers[int(parts[2])].layer_number - 1


def wrap(
    modules: list[torch.nn.Module], tf_config: Any, spec: MegatronEngineSpec, device: torch.device
) -> list[torch.nn.Module]:
    """Each chunk in Float16Module when parameters are bf16, then in DDP (grad buffers) when trainable."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.transformer.module import Float16Module

    overlap = spec.overlap_grad_reduce
    if overlap is None:  # on by default on GPUs, as in Megatron's training loop
        overlap = device.type == "cuda"
    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True,
        overlap_grad_reduce=overlap,
        use_distributed_optimizer=spec.use_distributed_optimizer,
    )
    wrapped = []
    for index, module in enumerate(modules):
        if spec.optim is None:
            module.eval()
        inner = Float16Module(tf_config, module) if spec.param_dtype == torch.bfloat16 else module
        # As Megatron does: only the first virtual chunk gets buckets overlapping with backward.
        wrapped.append(
            inner
            if spec.optim is None
            else DistributedDataParallel(tf_config, ddp_config, inner, disable_bucketing=index > 0)
        )
    if overlap and spec.optim is not None:
        # What Megatron's schedules call to hold the reduction until the last micro-batch's backward and then
        # start each chunk's buckets as their grads are ready (finalize_model_grads waits for them).
        no_sync = [ddp.no_sync for ddp in wrapped]
        grad_sync = [ddp.start_grad_sync for ddp in wrapped]
        tf_config.no_sync_func = no_sync[0] if len(wrapped) == 1 else no_sync
        tf_config.grad_sync_func = grad_sync[0] if len(wrapped) == 1 else grad_sync
    return wrapped


def build_optimizer(spec: MegatronEngineSpec, model: list[torch.nn.Module]) -> tuple[Any, Any]:
    """Megatron's Adam over the wrapped chunks and its LR/weight-decay schedule, from `spec.optim`."""
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    optim = spec.optim
    config = OptimizerConfig(
        optimizer="adam",
        lr=optim.lr,
        min_lr=optim.min_lr,
        weight_decay=optim.weight_decay,
        adam_beta1=optim.betas[0],
        adam_beta2=optim.betas[1],
        clip_grad=optim.clip_grad,
        bf16=spec.param_dtype == torch.bfloat16,
        params_dtype=spec.param_dtype,
        use_distributed_optimizer=spec.use_distributed_optimizer,
    )
    # Without grad: Megatron's distributed optimizer takes each fp32 parameter's shard as a view of the parameter
    # (bf16's it detaches first), and a view made with grad enabled keeps an autograd edge to the parameter's
    # gradient accumulator, whose DDP hooks hold the model: a reference cycle through C++ that Python's collector
    # cannot see, so such an engine was never freed, and each step warned of reading a non-leaf tensor's .grad.
    # Made without grad the shards are leaves, as bf16's are.
    with torch.no_grad():
        optimizer = get_megatron_optimizer(config, model)
    compat.init_optimizer_state(optimizer)
    decay_steps = optim.lr_decay_steps or optim.total_training_steps
    scheduler = OptimizerParamScheduler(
        optimizer,
        init_lr=optim.lr_warmup_init,
        max_lr=optim.lr,
        min_lr=optim.min_lr,
        lr_warmup_steps=optim.lr_warmup_steps,
        lr_decay_steps=max(decay_steps, optim.lr_warmup_steps + 1),
        lr_decay_style=optim.lr_decay_style,
        start_wd=optim.weight_decay,
        end_wd=optim.weight_decay,
        wd_incr_steps=max(decay_steps, 1),
        wd_incr_style="constant",
        # a resume applies this run's schedule (trainer/resume_policy.py); only the step count is restored
        use_checkpoint_opt_param_scheduler=False,
        override_opt_param_scheduler=True,
    )
    return optimizer, scheduler


def optimizer_step(optimizer: Any, scheduler: Any) -> tuple[float, bool]:
    """Clip and step unless the grad norm is not finite; the LR schedule advances either way."""
    found_inf = optimizer.prepare_grads()  # only with a loss scaler: never under bf16 or fp32
    grad_norm = float(optimizer.get_grad_norm())
    stepped = math.isfinite(grad_norm) and not found_inf
    if stepped:  # Megatron would clip by a NaN norm and write NaN into every parameter
        stepped = compat.step_with_norm(optimizer, grad_norm)
    else:
        logger.warning("non-finite grad norm %s: optimizer step skipped", grad_norm)
    optimizer.zero_grad()
    scheduler.step(increment=1)
    return grad_norm, stepped
