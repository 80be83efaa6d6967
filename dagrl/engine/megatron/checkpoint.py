"""Reshardable Megatron checkpoints of an engine: model, optimizer (+ LR scheduler) and RNG states (an actor's HF
export is hf_export.py).

Written with megatron `dist_checkpointing` (torch_dist format) into one directory; the trainer makes the write
atomic. Tensors are keyed by their global names, so a checkpoint saved at one layout (TP, PP, VPP, DP, EP) loads at
another. The optimizer state is in the format of the optimizer that saved it, plain or distributed, which the other
does not read: a load that switches is refused (the weights alone still load). RNG states are per (PP, TP) rank and
are restored only at the layout they were saved with. Which parts are written and restored is `spec.save_contents` /
`spec.load_contents` (verl's names: model, optimizer, extra = RNG states); the common part records what the
checkpoint holds, the model it came from and its dtype, so `scripts/model_merger.py` needs nothing else.
"""

from __future__ import annotations

import copy
import logging
import os
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
import torch

from dagrl.utils.lifetime import children_die_with_us
from dagrl.engine.megatron import compat
from dagrl.engine.megatron.hf_config import layer_spec_name
from dagrl.engine.megatron.lora import check_lora_checkpoint, lora_record

# the HF export's names, where the trainer (an actor checkpoint's huggingface/) and scripts/model_merger.py import them

if TYPE_CHECKING:
    from dagrl.engine.megatron.engine import MegatronEngine

logger = logging.getLogger(__name__)

CONTENTS = ("model", "optimizer", "extra")  # the parts a Megatron checkpoint can hold
_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _layout_key() -> list[int]:
    from megatron.core import parallel_state as ps

    return [
        ps.get_tensor_model_parallel_world_size(),
        ps.get_pipeline_model_parallel_world_size(),
        ps.get_virtual_pipeline_model_parallel_world_size() or 1,
        ps.get_data_parallel_world_size(),
        ps.get_expert_model_parallel_world_size(),
    ]


def _rng_state() -> dict[str, Any]:
    from megatron.core import tensor_parallel

    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "tracker": tensor_parallel.get_cuda_rng_tracker().get_states(),
    }
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


def _has_frozen_params(engine: "MegatronEngine") -> bool:
    return any(not param.requires_grad for module in engine.modules for param in module.parameters())


def _trained_names(module: torch.nn.Module) -> set[str]:
    return {name for name, param in module.named_parameters() if param.requires_grad}


def _model_state(
    modules: list[torch.nn.Module], use_distributed_optimizer: bool, trained_only: bool = False
) -> dict[str, Any]:
    """The chunks' sharded state; with LoRA only what trains, the adapters and a critic's value head (the frozen
    base is model_path's)."""
    metadata = compat.sharded_state_dict_metadata(use_distributed_optimizer)
    states = [module.sharded_state_dict(metadata=dict(metadata)) for module in modules]
    if trained_only:
        trained = [_trained_names(module) for module in modules]
        states = [{k: v for k, v in state.items() if k in names} for state, names in zip(states, trained)]
    return {f"model{index}": state for index, state in enumerate(states)}


def _sharded_state_dict(engine: "MegatronEngine", is_loading: bool, parts: Iterable[str]) -> dict[str, Any]:
    from megatron.core import parallel_state as ps
    from megatron.core.dist_checkpointing.mapping import ShardedObject

    parts = set(parts)
    metadata = compat.sharded_state_dict_metadata(engine.spec.use_distributed_optimizer)
    model_state = _model_state(engine.modules, engine.spec.use_distributed_optimizer, engine.spec.lora is not None)
    state: dict[str, Any] = dict(model_state) if "model" in parts else {}
    pp, tp = ps.get_pipeline_model_parallel_world_size(), ps.get_tensor_model_parallel_world_size()
    if "optimizer" in parts:
        if _has_frozen_params(engine) and engine.spec.lora is None:
            # Optimizer state covers only the trainable layers of the stacked decoder tensors, which
            # dist_checkpointing cannot store as sharded tensors: keep it whole per (PP, TP) rank.
            state["optimizer_partial"] = ShardedObject(
                "optimizer_partial",
                None if is_loading else engine.optimizer.state_dict(),
                (pp, tp),
                (ps.get_pipeline_model_parallel_rank(), ps.get_tensor_model_parallel_rank()),
                replica_id=ps.get_data_parallel_rank(with_context_parallel=True),
            )
        else:
            # The nested per-chunk dict, not a merge: virtual chunks share local key names.
            state["optimizer"] = engine.optimizer.sharded_state_dict(
                model_state, is_loading=is_loading, metadata=dict(metadata)
            )
        state["scheduler"] = engine.scheduler.state_dict()
    if "extra" in parts:
        state["rng"] = ShardedObject(
            "rng_state",
            None if is_loading else _rng_state(),
            (pp, tp),
            (ps.get_pipeline_model_parallel_rank(), ps.get_tensor_model_parallel_rank()),
            replica_id=ps.get_data_parallel_rank(with_context_parallel=True),
        )
    state["layout"] = _layout_key()
    return state


def _common(path: str) -> dict[str, Any]:
    """The checkpoint's non-sharded part (written once, by rank 0); ValueError if it is no dagrl checkpoint.
    megatron-core < 0.17 keeps it in common.pt, later versions inside the torch_dist files: megatron reads both."""
    from megatron.core import dist_checkpointing

    if not (Path(path) / "metadata.json").is_file():
        raise ValueError(f"{path} is not a Megatron dist checkpoint (no metadata.json)")
    common = dist_checkpointing.load_common_state_dict(path)
    if not isinstance(common, dict) or "layout" not in common:
        raise ValueError(f"{path} is a Megatron dist checkpoint but not one written by dagrl (no layout record)")
    return common


def check_layer_spec(path: str, modules: list[torch.nn.Module], recorded: str | None) -> None:
    here = layer_spec_name(modules)
    if recorded is not None and recorded != here:
        raise ValueError(
            f"checkpoint {path} holds a model built with the {recorded} layer spec; this process builds "
            f"the {here} spec (TransformerEngine {'not ' if here == 'local' else ''}in use), whose "
            f"tensor names differ: load it where the same spec is built (TransformerEngine layers need "
            f"a GPU with transformer-engine installed)"
        )


def describe(path: str, common: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a checkpoint directory holds: {contents, model_path, param_dtype, role, layer_spec, layout}.
    Checkpoints written before these were recorded hold every part and name no model. Raises ValueError if
    `path` is no dagrl Megatron checkpoint."""
    common = _common(path) if common is None else common
    info = {"contents": list(CONTENTS), "model_path": None, "param_dtype": None, "role": None, "layer_spec": None}
    info.update(common.get("dagrl", {}))
    info["layout"] = list(common["layout"])
    return info


def _saved_step(part: dict[str, Any], distributed: bool) -> Any:
    """The Adam step of one saved optimizer: per param group in the distributed optimizer's state, shared by
    all parameters ("common_step") in the plain one's."""
    if distributed:
        steps = [group["step"] for group in part.get("optimizer", {}).get("param_groups", []) if "step" in group]
    else:
        steps = [part["state"]["common_step"]] if "common_step" in part.get("state", {}) else []
    return steps[0] if steps else None


def _as_current_chain(engine: "MegatronEngine", loaded: Any, saved: Any) -> Any:
    """The loaded optimizer state in the shape of this engine's optimizer chain.

    An MoE model's Megatron optimizer is a chain of a dense and an expert optimizer when EP > 1, and a single
    optimizer when EP = 1. Per-parameter tensors (Adam moments, main params) load by their global names into the
    current chain's template whatever the saved chain was; what is stored whole per optimizer (the param groups'
    hyperparameters and the Adam step) keeps the saved chain's shape, so when the lengths differ it is rebuilt:
    param groups from this optimizer (the scheduler sets their LR), the step from the saved state (every optimizer
    of a chain steps together)."""
    if saved is None:  # written by a run with trainable_top_layers: kept whole, see _sharded_state_dict
        raise ValueError(
            "this checkpoint's optimizer state was saved with frozen layers (trainable_top_layers) "
            "and loads only with the same trainable_top_layers; or restore load_contents=[model]"
        )
    inner = getattr(engine.optimizer, "chained_optimizers", None) or [engine.optimizer]
    saved_chain = [saved[key] for key in sorted(saved)] if all(isinstance(k, int) for k in saved) else [saved]
    if len(saved_chain) == len(inner):
        return loaded
    distributed = engine.spec.use_distributed_optimizer
    step = next((s for s in (_saved_step(part, distributed) for part in saved_chain) if s is not None), None)
    parts = [loaded[index] for index in range(len(inner))] if len(inner) > 1 else [loaded]
    rebuilt = []
    for part, optimizer in zip(parts, inner):
        own = optimizer.state_dict()
        if distributed:
            for group in own["optimizer"]["param_groups"]:
                if step is not None and "step" in group:
                    group["step"] = step
            rebuilt.append(
                {
                    **own,
                    "param_state": part["param_state"],
                    "param_state_sharding_type": compat.sharded_state_dict_metadata(True)[
                        "distrib_optim_sharding_type"
                    ],
                }
            )
            continue
        state = {key: value for key, value in part["state"].items() if key != "common_step"}
        if step is not None:
            state["common_step"] = step
        rebuilt.append({"state": state, "param_groups": copy.deepcopy(own["param_groups"])})
    return rebuilt[0] if len(inner) == 1 else dict(enumerate(rebuilt))


def state_is_finite(engine: "MegatronEngine") -> bool:
    """Collective: no NaN or inf in the engine's parameters, fp32 main parameters or optimizer moments on any rank
    (a checkpoint of such a state is never marked complete: every resume would load it and fail)."""
    tensors = [p for module in engine.modules for p in module.parameters()]
    if engine.optimizer is not None:
        for torch_optimizer in compat.torch_optimizers(engine.optimizer):
            tensors += [p for group in torch_optimizer.param_groups for p in group["params"]]
            tensors += [v for state in torch_optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
    flags = [torch.isfinite(t.detach()).all().to(engine.device) for t in tensors if t.numel()]  # offloaded ones too
    finite = torch.stack(flags).all() if flags else torch.tensor(True)
    flag = finite.to(device=engine.device, dtype=torch.int32).reshape(1)
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN)
    return bool(flag.item())


def save(engine: "MegatronEngine", path: str) -> None:
    """Collective: write the parts of `engine.spec.save_contents` into directory `path`."""
    from megatron.core import dist_checkpointing

    parts = [
        part
        for part in CONTENTS
        if part in engine.spec.save_contents and (part != "optimizer" or engine.optimizer is not None)
    ]
    Path(path).mkdir(parents=True, exist_ok=True)
    state = _sharded_state_dict(engine, is_loading=False, parts=parts)
    state["dagrl"] = {
        "contents": parts,
        "model_path": os.path.abspath(engine.spec.model_path),
        "param_dtype": _DTYPE_NAMES[engine.spec.param_dtype],
        "distributed_optimizer": engine.spec.use_distributed_optimizer,
        "role": engine.role,
        "layer_spec": layer_spec_name(engine.modules),
        "lora": lora_record(engine.spec.lora),
    }
    if engine.spec.lora is not None and engine.role == "actor":  # the adapter whole in PEFT names, for
        # scripts/model_merger.py (which exports actors only: a critic's adapter is nothing without its value head)
        from dagrl.engine.megatron.lora import gather_adapter, write_adapter

        adapter = gather_adapter(engine.modules, engine.hf_config, engine.spec.lora)
        if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
            write_adapter(adapter, path)
    compat.keep_write_results_in_process()
    with children_die_with_us():  # megatron forks a writer per file; a kill -9 of the trainer must take them along
        dist_checkpointing.save(state, path, sharded_strategy=compat.save_strategy())
    # debug: `path` is the save's temporary directory; the trainer names the published one
    logger.debug("saved Megatron checkpoint (%s) to %s", ", ".join(parts), path)


def saved_contents(path: str) -> list[str]:
    """The parts the checkpoint at `path` holds, so that pre-flight can compare them with load_contents before
    any model is built. ValueError if `path` is no dagrl Megatron checkpoint."""
    return describe(path, _common(path))["contents"]


def restorable_parts(path: str, load_contents: Iterable[str] | None, held: list[str]) -> list[str]:
    """The Megatron parts of `load_contents` (None: every part `held`), in CONTENTS order; ValueError naming
    load_contents when the checkpoint at `path` does not hold one of them."""
    wanted = [part for part in CONTENTS if part in (load_contents or held)]
    missing = [part for part in wanted if part not in held]
    if missing:
        raise ValueError(
            f"checkpoint {path} holds only {held} (save_contents of the run that wrote it); it cannot "
            f"restore {missing}: set actor_rollout_ref.actor.checkpoint.load_contents to a subset of "
            f"{held}"
        )
    return wanted


def _parts_to_load(engine: "MegatronEngine", path: str, held: list[str]) -> list[str]:
    wanted = restorable_parts(path, engine.spec.load_contents, held)
    if engine.optimizer is None:
        return [part for part in wanted if part != "optimizer"]
    if "optimizer" not in wanted:
        logger.warning("not restoring the optimizer from %s: Adam moments and the LR schedule start afresh", path)
    return wanted


def load(engine: "MegatronEngine", path: str) -> None:
    """Collective: restore the engine's state (the parts of `engine.spec.load_contents`) from directory `path`,
    saved at any layout."""
    from megatron.core import dist_checkpointing

    common = _common(path)
    info = describe(path, common)
    check_layer_spec(path, engine.modules, info["layer_spec"])
    check_lora_checkpoint(engine, path, info)
    parts = _parts_to_load(engine, path, info["contents"])
    here = _DTYPE_NAMES[engine.spec.param_dtype]
    if "optimizer" in parts and info["param_dtype"] not in (None, here):
        # bf16 parameters keep fp32 main copies in Megatron's optimizer, fp32 ones none: the states differ in kind
        raise ValueError(
            f"checkpoint {path} holds {info['param_dtype']} parameters and their optimizer state, and "
            f"this engine is built in {here}: set actor_rollout_ref.actor.megatron.param_dtype="
            f"{info['param_dtype']}, or restore the weights without the optimizer (checkpoint."
            f"load_contents=[model,extra])"
        )
    saved_distributed = info.get("distributed_optimizer")
    if "optimizer" in parts and saved_distributed not in (None, engine.spec.use_distributed_optimizer):
        kinds = {True: "distributed", False: "plain"}
        raise ValueError(
            f"checkpoint {path} holds the {kinds[saved_distributed]} optimizer's state, which the "
            f"{kinds[not saved_distributed]} optimizer this engine is built with does not read: set "
            f"actor_rollout_ref.actor.megatron.use_distributed_optimizer={str(saved_distributed).lower()}, or restore "
            f"the weights without the optimizer (checkpoint.load_contents=[model,extra])"
        )
    same_layout = info["layout"] == _layout_key()
    if not same_layout and "extra" in parts:
        parts.remove("extra")
        logger.info("checkpoint layout %s differs from %s: RNG states are not restored", info["layout"], _layout_key())
    state = _sharded_state_dict(engine, is_loading=True, parts=parts)
    if not same_layout and "optimizer_partial" in state:
        raise ValueError(
            f"checkpoint {path} was saved at layout {info['layout']} with frozen layers "
            f"(trainable_top_layers); it loads only at that layout, not {_layout_key()}"
        )
    loaded = dist_checkpointing.load(state, path)
    if "model" in parts:
        for index, module in enumerate(engine.modules):
            result = module.load_state_dict(loaded[f"model{index}"], strict=engine.spec.lora is None)
            if result.unexpected_keys or set(result.missing_keys) & _trained_names(module):
                raise ValueError(f"checkpoint {path}: trained tensors missing or unexpected: {result}")
    if "optimizer" in parts:
        # the saved param groups carry the saving run's max_lr/min_lr, which the scheduler reads per group: keep
        # this run's, so that a resume applies the config's LR (see trainer/resume_policy.py)
        schedule = [
            [{k: group[k] for k in ("max_lr", "min_lr") if k in group} for group in torch_optimizer.param_groups]
            for torch_optimizer in compat.torch_optimizers(engine.optimizer)
        ]
        engine.optimizer.load_state_dict(
            _as_current_chain(engine, loaded["optimizer"], common.get("optimizer"))
            if "optimizer" in loaded
            else loaded["optimizer_partial"]
        )
        for torch_optimizer, groups in zip(compat.torch_optimizers(engine.optimizer), schedule):
            for group, own in zip(torch_optimizer.param_groups, groups):
                group.update(own)
        compat.unshare_adam_steps(engine.optimizer)
        engine.scheduler.load_state_dict(loaded["scheduler"])
        engine.track_optimizer_state()
    elif "model" in parts and engine.optimizer is not None:
        engine.optimizer.reload_model_params()  # fp32 main params (bf16 runs) follow the loaded weights
    if "extra" in parts:
        _set_rng_state(loaded["rng"])
    logger.info("loaded Megatron checkpoint (%s) from %s", ", ".join(parts), path)


def load_model_weights(modules: list[torch.nn.Module], path: str, use_distributed_optimizer: bool) -> None:
    """Collective: fill freshly built Megatron chunks with the model part of the dist checkpoint at `path` (any
    layout); used instead of the HF safetensors when starting from a pre-converted Megatron checkpoint."""
    from megatron.core import dist_checkpointing

    if not (Path(path) / "metadata.json").is_file():
        raise ValueError(f"{path} is not a Megatron dist checkpoint (no metadata.json)")
    common = dist_checkpointing.load_common_state_dict(path)  # common.pt (< 0.17) or inside the torch_dist files
    if isinstance(common, dict) and "dagrl" in common:  # written by dagrl (else e.g. verl's converter)
        check_layer_spec(path, modules, common["dagrl"].get("layer_spec"))
    loaded = dist_checkpointing.load(_model_state(modules, use_distributed_optimizer), path)
    for index, module in enumerate(modules):
        module.load_state_dict(loaded[f"model{index}"], strict=True)
    logger.info("loaded initial model weights from Megatron checkpoint %s", path)
