"""Every megatron-core version difference dagrl depends on, in one place (supported: >=0.15,<0.20).

0.16.1 runs the CPU tests here; the GPU kit has 0.19.2. Anything that differs between them is answered here so
the rest of the package can use one spelling.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import torch
from packaging.version import Version

from dagrl.engine.megatron.lazy_compile import deferred_compile

logger = logging.getLogger(__name__)

SUPPORTED = (Version("0.15"), Version("0.20"))


def megatron_version() -> Version:
    with deferred_compile():  # the engine's first import of megatron-core, where import_megatron did not run first
        from megatron.core import package_info

    return Version(package_info.__version__)


def check_version() -> None:
    version = megatron_version()
    if not SUPPORTED[0] <= version < SUPPORTED[1]:
        raise ImportError(f"megatron-core {version} is outside the supported range >={SUPPORTED[0]},<{SUPPORTED[1]}")


def import_megatron(keep_wandb: bool) -> None:
    """Import megatron.core the first time. Its timers import wandb where it is installed, and `import wandb` makes
    two temporary directories (wandb-media, wandb-artifacts) that only its exit handler removes, so every killed run
    left them in /tmp. dagrl never gives megatron a wandb writer: hide the package during this import (megatron
    catches the ImportError), unless the run logs to wandb, and let later imports of wandb find it again."""
    hide = not keep_wandb and "wandb" not in sys.modules and "megatron.core" not in sys.modules
    if hide:
        sys.modules["wandb"] = None  # type: ignore[assignment]  # `import wandb` raises ImportError
    try:
        with deferred_compile():  # its fusions' torch.compile wrappers made at their first call (lazy_compile.py)
            import megatron.core  # noqa: F401 - imported for its effect: megatron-core loads with wandb hidden
    finally:
        if hide and sys.modules.get("wandb", 0) is None:
            del sys.modules["wandb"]


def ddp_buffers(ddp: Any) -> list[Any]:
    """The contiguous param/grad buffers of a Megatron DDP module (dense and expert-parallel)."""
    return list(getattr(ddp, "buffers", [])) + list(getattr(ddp, "expert_parallel_buffers", []))


def torch_optimizers(optimizer: Any) -> list[torch.optim.Optimizer]:
    """The torch optimizers inside a Megatron optimizer (a ChainedOptimizer since 0.11, or a single one)."""
    inner = getattr(optimizer, "chained_optimizers", None) or [optimizer]
    return [o.optimizer for o in inner if getattr(o, "optimizer", None) is not None]


def sharded_state_dict_metadata(use_distributed_optimizer: bool) -> dict[str, Any]:
    """Metadata for model/optimizer sharded_state_dict: a reshardable distributed-optimizer format.

    `fully_sharded_model_space` (the default) does not work on CPU; `fully_reshardable` loads at any layout.
    `dp_cp_group` is filled in by megatron itself when absent (0.16+)."""
    # chained_optim_avoid_prefix: optimizer keys must not depend on how many optimizers are chained (MoE has a
    # dense and an expert one), or EP2 -> EP1 checkpoints do not load.
    metadata: dict[str, Any] = {"singleton_local_shards": False, "chained_optim_avoid_prefix": True}
    if use_distributed_optimizer:
        metadata["distrib_optim_sharding_type"] = "fully_reshardable"
    return metadata


def save_strategy() -> Any:
    """The torch_dist save strategy, without async or process-spawning writers (they hang on CPU tests)."""
    from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy

    return TorchDistSaveShardedStrategy("torch_dist", 1, thread_count=1)


def keep_write_results_in_process() -> None:
    """Before a save: megatron's FileSystemWriterAsync passes its write results through a queue of a multiprocessing
    Manager it spawns at the first save and keeps for good: a server process that re-imports the trainer's main
    module (torch, ~300 MB, the log file open as its stderr) and the resource tracker the spawn starts. Neither
    watches its parent, so a trainer killed with SIGKILL left both running forever. dagrl saves
    synchronously (save_strategy, no async_sharded_save): the results never leave this process, so a plain queue
    does, and no helper process is started."""
    import queue

    from megatron.core.dist_checkpointing.strategies import filesystem_async

    if getattr(filesystem_async, "_results_queue", False) is None:  # not yet created (absent in other versions)
        filesystem_async._results_queue = queue.Queue()


def init_optimizer_state(optimizer: Any) -> None:
    """Create the optimizer state now rather than at the first step, so that it can be offloaded and
    checkpointed before any step (the distributed optimizer reads Adam's 'step' when building a state dict)."""
    inner = getattr(optimizer, "chained_optimizers", None) or [optimizer]
    for megatron_optimizer in inner:
        torch_optimizer = getattr(megatron_optimizer, "optimizer", None)
        init_fn = getattr(megatron_optimizer, "init_state_fn", None)
        if torch_optimizer is None:
            continue
        if init_fn is not None:
            init_fn(torch_optimizer, megatron_optimizer.config)
        if isinstance(torch_optimizer, (torch.optim.Adam, torch.optim.AdamW)):
            for group in torch_optimizer.param_groups:
                for param in group["params"]:
                    state = torch_optimizer.state[param]
                    # Exactly what torch's Adam creates lazily on its first step.
                    state.setdefault("step", torch.tensor(0.0, dtype=torch.get_default_dtype()))
                    state.setdefault("exp_avg", torch.zeros_like(param, memory_format=torch.preserve_format))
                    state.setdefault("exp_avg_sq", torch.zeros_like(param, memory_format=torch.preserve_format))


def unshare_adam_steps(optimizer: Any) -> None:
    """After loading, the distributed optimizer's torch-Adam path (no Apex/TE) gives every parameter the same
    'step' tensor; Adam increments it in place once per parameter. Give each parameter its own."""
    for torch_optimizer in torch_optimizers(optimizer):
        for state in torch_optimizer.state.values():
            if torch.is_tensor(state.get("step")):
                state["step"] = state["step"].detach().clone()


def transformer_engine_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("transformer_engine") is not None


def step_with_norm(optimizer: Any, grad_norm: float) -> bool:
    """`optimizer.step()` after the caller ran `prepare_grads()` and took `get_grad_norm()`, without doing both
    again: Megatron's ChainedOptimizer.step copies every model grad into the main grads (a Python loop over the
    parameters) and reduces their norm (an all-reduce and a host sync) itself. Its two calls answer from what the
    caller has for this one step; what the step does with them (clipping by that norm, 0.19's separate grad-norm
    groups, the update) stays Megatron's. Returns whether the update was applied."""
    if getattr(optimizer, "chained_optimizers", None) is None:  # a lone optimizer's clip recomputes the norm anyway
        return bool(optimizer.step()[0])
    optimizer.prepare_grads = lambda: False  # instance attributes over the methods, for this call only
    optimizer.get_grad_norm = lambda: grad_norm
    try:
        return bool(optimizer.step()[0])
    finally:
        del optimizer.prepare_grads, optimizer.get_grad_norm


def destroy_model_parallel() -> None:
    """Frees Megatron's process groups at the end of a run (dagrl.utils.dist.destroy_process_groups)."""
    import gc

    from megatron.core import parallel_state
    from megatron.core.models.common.embeddings import rotary_pos_embedding

    rotary_pos_embedding.RotaryEmbedding.forward.cache_clear()  # its lru_cache holds the modules, so their CP groups
    gc.collect()  # the run's engines (reference cycles) go first, while the groups they hold still work
    parallel_state.destroy_model_parallel()
    # 0.16's destroy_model_parallel leaves these two set (later versions reset them too)
    parallel_state._INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP = None
    parallel_state._INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP_GLOO = None
