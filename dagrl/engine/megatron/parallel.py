"""Process groups and seeds for Megatron models."""

from __future__ import annotations

import logging
import random

import numpy as np
import torch
import torch.distributed as dist

from dagrl.engine.megatron import compat
from dagrl.placement import ParallelLayout
from dagrl.utils.dist import before_destroy, init_process_group

logger = logging.getLogger(__name__)


def local_device() -> torch.device:
    """The device this rank computes on: its GPU (the current device, which the process group's set-up chose from the
    node-local rank; a pool's LOCAL_RANK counts within the pool) or the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def init_distributed() -> None:
    """Join the default process group (torchrun's or Ray's env), or make a world of one with the env torchrun would
    set: an in-process vLLM engine (external_launcher) reads RANK and the rendezvous address from it."""
    init_process_group(timeout_s=30 * 60)
    logger.info("torch.distributed: %s, rank %d of %d", dist.get_backend(), dist.get_rank(), dist.get_world_size())


def init_model_parallel(layout: ParallelLayout, seed: int) -> None:
    """Initialise torch.distributed (if needed), Megatron's parallel state for `layout`, and all seeds.

    Megatron's parallel state is process-global: a second engine in the same process must use the same layout.
    """
    from megatron.core import parallel_state

    init_distributed()
    if torch.cuda.is_available():
        torch.cuda.set_device(local_device())
    else:
        from dagrl.engine.megatron.cpu import install_cpu_shim

        install_cpu_shim()
    wanted = (
        layout.tensor_model_parallel_size,
        layout.pipeline_model_parallel_size,
        layout.virtual_pipeline_model_parallel_size,
        layout.context_parallel_size,
        layout.expert_model_parallel_size,
    )
    if parallel_state.model_parallel_is_initialized():
        current = (
            parallel_state.get_tensor_model_parallel_world_size(),
            parallel_state.get_pipeline_model_parallel_world_size(),
            parallel_state.get_virtual_pipeline_model_parallel_world_size(),
            parallel_state.get_context_parallel_world_size(),
            parallel_state.get_expert_model_parallel_world_size(),
        )
        if current != wanted:
            raise ValueError(
                f"Megatron parallel state already initialised with (tp, pp, vpp, cp, ep)={current}; "
                f"this engine asks for {wanted}: every Megatron engine of one process must share it"
            )
    else:
        parallel_state.initialize_model_parallel(**layout.sizes())
        before_destroy(compat.destroy_model_parallel)  # Megatron's groups go before the default one
    seed_everything(seed)


def seed_everything(seed: int) -> None:
    """Python, numpy, torch and Megatron's model-parallel RNG tracker (which owns dropout/init streams).

    The seed is offset by the pipeline rank (as Megatron does) so that stages do not share streams."""
    from megatron.core import parallel_state, tensor_parallel

    stage_seed = seed + 100 * parallel_state.get_pipeline_model_parallel_rank()
    random.seed(stage_seed)
    np.random.seed(stage_seed)
    torch.manual_seed(stage_seed)
    tensor_parallel.model_parallel_cuda_manual_seed(stage_seed)
