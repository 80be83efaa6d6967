"""Reshardable Megatron checkpoints of an engine: model, optimizer, LR scheduler and RNG states.

Written with megatron `dist_checkpointing` (torch_dist format) into one directory; the trainer makes the write
atomic. Tensors are keyed by their global names, so a checkpoint saved at one layout (TP, PP, VPP, DP, the
distributed optimizer on or off) loads at another. RNG states are per (PP, TP) rank and are restored only at the
layout they were saved with.
"""
from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dagrl.engine.megatron import compat

if TYPE_CHECKING:
    from dagrl.engine.megatron.engine import MegatronActorEngine

logger = logging.getLogger(__name__)


def _layout_key() -> list[int]:
    from megatron.core import parallel_state as ps
    return [ps.get_tensor_model_parallel_world_size(), ps.get_pipeline_model_parallel_world_size(),
            ps.get_virtual_pipeline_model_parallel_world_size() or 1, ps.get_data_parallel_world_size(),
            ps.get_expert_model_parallel_world_size()]


def _rng_state() -> dict[str, Any]:
    from megatron.core import tensor_parallel
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
             "tracker": tensor_parallel.get_cuda_rng_tracker().get_states()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    from megatron.core import tensor_parallel
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    tensor_parallel.get_cuda_rng_tracker().set_states(state["tracker"])


def _has_frozen_params(engine: "MegatronActorEngine") -> bool:
    return any(not param.requires_grad for module in engine.modules for param in module.parameters())


def _sharded_state_dict(engine: "MegatronActorEngine", is_loading: bool) -> dict[str, Any]:
    from megatron.core import parallel_state as ps
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    metadata = compat.sharded_state_dict_metadata(engine.spec.use_distributed_optimizer)
    state: dict[str, Any] = {}
    model_state: dict[str, Any] = {}
    for index, module in enumerate(engine.modules):
        model_state[f"model{index}"] = module.sharded_state_dict(metadata=dict(metadata))
    state.update(model_state)
    pp, tp = ps.get_pipeline_model_parallel_world_size(), ps.get_tensor_model_parallel_world_size()
    if engine.optimizer is not None:
        if _has_frozen_params(engine):
            # Optimizer state covers only the trainable layers of the stacked decoder tensors, which
            # dist_checkpointing cannot store as sharded tensors: keep it whole per (PP, TP) rank.
            state["optimizer_partial"] = ShardedObject(
                "optimizer_partial", None if is_loading else engine.optimizer.state_dict(), (pp, tp),
                (ps.get_pipeline_model_parallel_rank(), ps.get_tensor_model_parallel_rank()),
                replica_id=ps.get_data_parallel_rank(with_context_parallel=True))
        else:
            # The nested per-chunk dict, not a merge: virtual chunks share local key names.
            state["optimizer"] = engine.optimizer.sharded_state_dict(model_state, is_loading=is_loading,
                                                                     metadata=dict(metadata))
        state["scheduler"] = engine.scheduler.state_dict()
    state["rng"] = ShardedObject(
        "rng_state", None if is_loading else _rng_state(), (pp, tp),
        (ps.get_pipeline_model_parallel_rank(), ps.get_tensor_model_parallel_rank()),
        replica_id=ps.get_data_parallel_rank(with_context_parallel=True))
    state["layout"] = _layout_key()
    return state


def save(engine: "MegatronActorEngine", path: str) -> None:
    """Collective: write the engine's state into directory `path`."""
    from megatron.core import dist_checkpointing

    Path(path).mkdir(parents=True, exist_ok=True)
    state = _sharded_state_dict(engine, is_loading=False)
    dist_checkpointing.save(state, path, sharded_strategy=compat.save_strategy())
    logger.info("saved Megatron checkpoint to %s", path)


def load(engine: "MegatronActorEngine", path: str) -> None:
    """Collective: restore the engine's state from directory `path` (any layout)."""
    from megatron.core import dist_checkpointing

    saved_layout = dist_checkpointing.load_common_state_dict(path)["layout"]
    same_layout = list(saved_layout) == _layout_key()
    state = _sharded_state_dict(engine, is_loading=True)
    if not same_layout and "optimizer_partial" in state:
        raise ValueError(f"checkpoint {path} was saved at layout {saved_layout} with frozen layers "
                         f"(trainable_top_layers); it loads only at that layout, not {_layout_key()}")
    if not same_layout:
        state.pop("rng")
        logger.info("checkpoint layout %s differs from %s: RNG states are not restored", saved_layout,
                    _layout_key())
    loaded = dist_checkpointing.load(state, path)
    for index, module in enumerate(engine.modules):
        module.load_state_dict(loaded[f"model{index}"], strict=True)
    if engine.optimizer is not None:
        engine.optimizer.load_state_dict(loaded["optimizer"] if "optimizer" in loaded
                                         else loaded["optimizer_partial"])
        compat.unshare_adam_steps(engine.optimizer)
        engine.scheduler.load_state_dict(loaded["scheduler"])
        engine.track_optimizer_state()
    if same_layout:
        _set_rng_state(loaded["rng"])
    logger.info("loaded Megatron checkpoint from %s", path)
