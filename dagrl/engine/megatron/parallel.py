"""Process groups and seeds for Megatron models."""

from __future__ import annotations

import logging
import os
import random
import socket
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from dagrl.engine.megatron import compat
from dagrl.placement import ParallelLayout
from dagrl.utils.dist import before_destroy

logger = logging.getLogger(__name__)


def local_device() -> torch.device:
    """The device this rank computes on: its GPU (the current device, which the process group's set-up chose from the
    node-local rank; a pool's LOCAL_RANK counts within the pool) or the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def init_distributed() -> None:
    """Join the default process group (torchrun/Ray env), or make a world of one when there is no env. The world of
    one exports nothing: a child process would read an exported WORLD_SIZE/MASTER_PORT as its own launch and bind
    the parent's port (an in-process vLLM engine takes RANK from vllm_start.external_launcher_env instead)."""
    if dist.is_initialized():
        return
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=backend, timeout=timedelta(minutes=30))
    else:
        address = f"tcp://127.0.0.1:{_free_port()}"
        dist.init_process_group(backend=backend, init_method=address, rank=0, world_size=1)
    logger.info("torch.distributed: %s, rank %d of %d", backend, dist.get_rank(), dist.get_world_size())


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
