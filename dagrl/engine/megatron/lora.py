"""LoRA on a Megatron model (the actor, the critic): adapters on the targeted linears of every decoder layer, the base
weights frozen (a critic's value head, new, trains beside the adapters).

Each targeted linear keeps its own parameters and names (checkpoints, the weight rules and the export see the same
model) and gains two parameters, `lora_A` and `lora_B`, added by a forward hook: y = base(x) + alpha/r * B A drop(x).
Their tensor-parallel layout follows the base weight's:
  column-parallel (linear_qkv, linear_fc1): A [r, in] replicated, B [out/tp, r] split like the weight's rows; the
    rank-r activation is copied into the TP region (all-gathered over the sequence under sequence parallelism)
  row-parallel (linear_proj, linear_fc2): A [r, in/tp] split like the weight's columns, B [out, r] replicated; the
    rank-r activation is summed over TP (reduce-scattered over the sequence under sequence parallelism)
so only [tokens, r] activations cross ranks. B starts at zero: step 0 is the base model exactly. A is drawn from a
generator seeded by the run seed and the linear's global name, so every layout starts from the same adapter.

Merged sync (`LoraSpec.merged`): the rollout receives W + s·B·A summed in fp32 and rounded to W's dtype (s =
alpha/r), a rounding the unmerged forward x·W + s·B·(A·x) never makes. So that the actor computes with the very
weights the rollout serves, a forward pre-hook swaps each adapted weight's data for this rank's shard of that merge
(no communication: the merge of a shard is the shard of the merge), and the forward hook puts W back and adds
`delta - delta.detach()`: zero in value, the adapter's gradient path. The base linear's backward reads the Parameter,
W again by then, so dx = dy·W + s·dy·B·A as unmerged: the gradients are the unmerged forward's (straight through the
rounding). Where dropout draws (training with dropout > 0) the forward stays unmerged; the adapters-off reference
never merges.

MoE experts get no adapter (pre-flight refuses fc targets on MoE families): an adapter shared by a layer's experts
changes what each expert computes, one per expert multiplies the adapter state by the expert count, and neither is
what vLLM's LoRA serves for every MoE family. The reference model is this model with its adapters off
(`adapters_off`), so no second copy of the weights is built.
"""

from __future__ import annotations

import contextlib
import math
import os
import zlib
from typing import Any, Iterable, Iterator

import torch
import torch.nn.functional as F

from dagrl.config.schema.lora import MEGATRON_TO_HF
from dagrl.engine.lora import LoraAdapter, LoraSpec
from dagrl.engine.lora_peft import PREFIX as PEFT_PREFIX
from dagrl.engine.lora_peft import merged_weight, module_pairs
from dagrl.utils.paths import another_model

COLUMN = ("linear_qkv", "linear_fc1")  # the others in MEGATRON_TO_HF are row-parallel


class _State:
    """What every hook of one model reads: the spec and whether the adapters apply."""

    def __init__(self, spec: LoraSpec, sequence_parallel: bool) -> None:
        self.spec, self.sequence_parallel, self.enabled = spec, sequence_parallel, True


def adapted_linears(chunk: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module]]:
    """(local name, module) of each linear of `chunk` that holds an adapter."""
    for name, module in chunk.named_modules():
        if hasattr(module, "_lora"):
            yield name, module


def _global_name(chunk: torch.nn.Module, name: str) -> str:
    parts = name.split(".")
    parts[2] = str(chunk.decoder.layers[int(parts[2])].layer_number - 1)
    return ".".join(parts)


def apply_lora(
    chunks: list[torch.nn.Module], spec: LoraSpec, tf_config: Any, seed: int, keep: Iterable[torch.nn.Module] = ()
) -> None:
    """Freeze every parameter of `chunks` but those of the `keep` modules, and give each targeted (non-expert) linear
    an adapter. `keep` is what has no pre-trained weights to hold still (PEFT's modules_to_save: a critic's value
    head), so it trains beside the adapters."""
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

    tp_rank, tp_size = ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size()
    state = _State(spec, bool(tf_config.sequence_parallel))
    kept = {id(param) for module in keep for param in module.parameters()}
    for chunk in chunks:
        for param in chunk.parameters():
            if id(param) not in kept:
                param.requires_grad_(False)
        targets = [
            (name, module)
            for name, module in chunk.named_modules()
            if name.startswith("decoder.layers.")
            and name.rsplit(".", 1)[-1] in spec.targets
            and ".experts." not in name
        ]
        for name, module in targets:
            column = name.rsplit(".", 1)[-1] in COLUMN
            weight = module.weight  # [out/tp, in] column-parallel, [out, in/tp] row-parallel
            out_features, in_features = weight.shape[0], weight.shape[1] * (1 if column else tp_size)
            generator = torch.Generator().manual_seed(zlib.crc32(f"{seed}:{_global_name(chunk, name)}".encode()))
            full_a = torch.empty(spec.rank, in_features)
            bound = 1 / math.sqrt(in_features)  # PEFT's kaiming_uniform(a=sqrt(5)) bound
            full_a.uniform_(-bound, bound, generator=generator)
            a = full_a if column else full_a.chunk(tp_size, dim=1)[tp_rank]
            module.lora_A = torch.nn.Parameter(a.to(device=weight.device, dtype=weight.dtype).contiguous())
            module.lora_B = torch.nn.Parameter(
                torch.zeros(out_features, spec.rank, device=weight.device, dtype=weight.dtype)
            )
            split, whole = (module.lora_B, module.lora_A) if column else (module.lora_A, module.lora_B)
            set_tensor_model_parallel_attributes(split, True, 0 if column else 1, 1)
            if state.sequence_parallel:  # its grad covers this rank's tokens only: summed over TP like a norm's
                whole.sequence_parallel = True
            module._lora = (state, column)
            if spec.merged:
                module.register_forward_pre_hook(_swap_in_merged, with_kwargs=True)
            # always_call: a forward that raises still gets its base weight back
            module.register_forward_hook(_add_adapter, with_kwargs=True, always_call=True)
            swiglu = name.endswith("linear_fc1") and tf_config.gated_linear_unit  # rows [gate_r; up_r] on rank r
            _shard_for_checkpoint(module, "lora_B" if column else "lora_A", 0 if column else 1, swiglu)


def _normalized(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Transformer Engine fuses the layer's norm into linear_qkv / linear_fc1: their input is the un-normed one."""
    if not hasattr(module, "layer_norm_weight"):
        return x
    weight = module.layer_norm_weight + (1 if getattr(module, "zero_centered_gamma", False) else 0)
    if getattr(module, "normalization", "RMSNorm") == "RMSNorm":
        return F.rms_norm(x, x.shape[-1:], weight.to(x.dtype), eps=module.eps)
    return F.layer_norm(x, x.shape[-1:], weight.to(x.dtype), module.layer_norm_bias.to(x.dtype), eps=module.eps)


def _swap_in_merged(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    """Merged sync: the base linear computes with this rank's shard of the weight the rollout receives."""
    state = module._lora[0]
    if not state.enabled or (module.training and state.spec.dropout > 0):
        return
    base = module.weight.data
    with torch.no_grad():
        merge = merged_weight(base, module.lora_A, module.lora_B, state.spec.scaling)
    module._lora_base = base  # only until the forward hook: the merge is freed with the forward
    module.weight.data = merge


def _add_adapter(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> Any:
    from megatron.core.tensor_parallel import mappings

    state, column = module._lora
    base = module.__dict__.pop("_lora_base", None)
    if base is not None:  # merged: W back, so the backward, the optimizer and the export see W
        module.weight.data = base
    if output is None or not state.enabled:  # (None: the forward raised)
        return output
    if base is not None and not (torch.is_grad_enabled() and module.lora_A.requires_grad):
        return output  # merged and nothing to differentiate: the output is complete
    x = args[0] if args else next(iter(kwargs.values()))
    x = F.dropout(_normalized(module, x), state.spec.dropout, module.training and state.spec.dropout > 0)
    h = F.linear(x, module.lora_A.to(x.dtype))
    if column:
        sp = mappings.gather_from_sequence_parallel_region if state.sequence_parallel else None
        h = sp(h) if sp else mappings.copy_to_tensor_model_parallel_region(h)
    elif state.sequence_parallel:
        h = mappings.reduce_scatter_to_sequence_parallel_region(h)
    else:
        h = mappings.reduce_from_tensor_model_parallel_region(h)
    delta = F.linear(h, module.lora_B.to(h.dtype)) * state.spec.scaling
    delta = delta.to((output[0] if isinstance(output, tuple) else output).dtype)
    if base is not None:  # the merged weight holds the adapter's value already: its gradient path only
        delta = delta - delta.detach()
    if isinstance(output, tuple):
        return (output[0] + delta, *output[1:])
    return output + delta


def _shard_for_checkpoint(module: torch.nn.Module, name: str, axis: int, swiglu: bool) -> None:
    """The linear's sharded state dict stores its TP-split factor as split (the stock one stores every extra tensor
    as replicated), and a gated fc1's B as its gate and up halves (as Megatron's MLP stores the weight), so a
    checkpoint reshards like the base weight."""
    from megatron.core.transformer.mlp import apply_swiglu_sharded_factory
    from megatron.core.transformer.utils import make_tp_sharded_tensor_for_checkpoint

    stock = module.sharded_state_dict

    def sharded_state_dict(prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None) -> dict:
        out = stock(prefix, sharded_offsets, metadata)
        tensor = make_tp_sharded_tensor_for_checkpoint(
            getattr(module, name), prefix + name, axis, prepend_offsets=sharded_offsets
        )
        if swiglu:
            singleton = (metadata or {}).get("singleton_local_shards", False)
            tensor = apply_swiglu_sharded_factory(tensor, sharded_offsets, singleton)
        out[prefix + name] = tensor
        return out

    module.sharded_state_dict = sharded_state_dict


@contextlib.contextmanager
def adapters_off(chunks: list[torch.nn.Module]) -> Iterator[None]:
    """The base model: every adapter of `chunks` skipped inside the block."""
    states = {id(m._lora[0]): m._lora[0] for chunk in chunks for _, m in adapted_linears(chunk)}
    for state in states.values():
        state.enabled = False
    try:
        yield
    finally:
        for state in states.values():
            state.enabled = True


# ---- the adapter in HF/PEFT names ---------------------------------------------------------------


def _local_adapter(chunks: list[torch.nn.Module], hf_config: Any) -> dict[str, torch.Tensor]:
    """This PP stage's adapters, full over TP, under PEFT names (collective over the TP group)."""
    from dagrl.engine.megatron.weight_export import _gather_shards
    from dagrl.engine.megatron.weights import full_hf_tensors, rule_for

    tied = bool(getattr(hf_config, "tie_word_embeddings", False))
    entries = [
        (chunk, name, module) for chunk in chunks for name, module in adapted_linears(chunk)
    ]  # one order on every TP rank
    split = [module.lora_B if module._lora[1] else module.lora_A for _, _, module in entries]
    gathered = _gather_shards([p.detach() for p in split], expert=False)
    out: dict[str, torch.Tensor] = {}
    for (chunk, name, module), parts in zip(entries, gathered):
        rule = rule_for(chunk, f"{name}.weight", tied, getattr(hf_config, "model_type", None))
        column = module._lora[1]
        for hf_name, full in full_hf_tensors(rule, parts, hf_config):
            stem = PEFT_PREFIX + hf_name[: -len(".weight")]
            a, b = (module.lora_A.detach(), full) if column else (full, module.lora_B.detach())
            out[f"{stem}.lora_A.weight"] = a.to("cpu", copy=True).contiguous()
            out[f"{stem}.lora_B.weight"] = b.to("cpu", copy=True).contiguous()
    return out


def gather_adapter(chunks: list[torch.nn.Module], hf_config: Any, spec: LoraSpec) -> LoraAdapter:
    """The whole model's adapter as a `LoraAdapter` on every rank, on the host (collective over all ranks)."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    tensors = _local_adapter(chunks, hf_config)
    if ps.get_pipeline_model_parallel_world_size() > 1:  # megabytes: objects are simplest
        stages: list[Any] = [None] * ps.get_pipeline_model_parallel_world_size()
        dist.all_gather_object(stages, tensors, group=ps.get_pipeline_model_parallel_group())
        tensors = {name: tensor for stage in stages for name, tensor in stage.items()}
    modules = tuple(hf for target in spec.targets for hf in MEGATRON_TO_HF[target])
    return LoraAdapter(tensors=tensors, rank=spec.rank, alpha=spec.alpha, target_modules=modules)


def merged(stream: Iterator[list[tuple[str, torch.Tensor]]], adapter: LoraAdapter) -> Iterator[list]:
    """The export's buckets with W + scaling * B A for every adapted HF weight (the base itself untouched), merged
    as every other consumer of an adapter merges it (lora_peft.merged_weight)."""
    pairs = module_pairs(adapter)
    for bucket in stream:
        yield [
            (name, merged_weight(tensor, *pairs[name], adapter.scaling) if name in pairs else tensor)
            for name, tensor in bucket
        ]


class AdaptersOffReference:
    """The reference model of a LoRA run: the actor's own frozen base, its adapters off for the pass."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def compute_log_prob(self, *args: Any, **kwargs: Any) -> Any:
        with adapters_off(self.actor.modules):
            return self.actor.compute_log_prob(*args, **kwargs)

    def offload_params(self) -> None:  # the actor moves its parameters itself
        pass


# ---- checkpoints ----------------------------------------------------------------------------------

MODEL_KEYS = {"actor": "actor_rollout_ref.model", "critic": "critic.model"}  # the config section of each role's model


def lora_record(spec: LoraSpec | None) -> dict[str, Any] | None:
    """What a checkpoint records of its adapters (None: a full model)."""
    return None if spec is None else {"rank": spec.rank, "alpha": spec.alpha, "targets": list(spec.targets)}


def check_lora_checkpoint(engine: Any, path: str, info: dict[str, Any]) -> None:
    """A LoRA checkpoint holds adapters over the base at the model path it recorded: only that base and the same
    adapter shapes take it; a full checkpoint does not load into adapters, nor adapters into a full model."""
    here, saved = lora_record(engine.spec.lora), info.get("lora")
    if saved is None and here is None:
        return
    model = MODEL_KEYS.get(engine.role, "actor_rollout_ref.model")
    fix = f"set {model}.lora.rank/alpha/target_modules to the saved run's"
    if (saved is None) != (here is None) or (saved["rank"], saved["targets"]) != (here["rank"], here["targets"]):
        raise ValueError(f"checkpoint {path} holds LoRA {saved}, this {engine.role} is built with LoRA {here}: {fix}")
    if another_model(info["model_path"], engine.spec.model_path):
        raise ValueError(
            f"checkpoint {path} holds LoRA adapters over the base model {info['model_path']}; this run's base is "
            f"{os.path.abspath(engine.spec.model_path)}: set {model}.path={info['model_path']}"
        )


ADAPTER_FILE = "adapter.safetensors"  # beside an actor checkpoint's shards: the adapter in PEFT names, full size


def write_adapter(adapter: LoraAdapter, directory: str) -> None:
    """The adapter as one safetensors file whose metadata holds rank, alpha and the target modules."""
    import json
    from pathlib import Path

    from safetensors.torch import save_file

    meta = {
        "rank": str(adapter.rank),
        "alpha": repr(adapter.alpha),
        "target_modules": json.dumps(adapter.target_modules),
    }
    save_file({n: t.contiguous() for n, t in adapter.tensors.items()}, str(Path(directory) / ADAPTER_FILE), meta)


def read_adapter(directory: str) -> LoraAdapter:
    """The `LoraAdapter` of a LoRA actor checkpoint (global_step_N/actor); FileNotFoundError for one without LoRA."""
    import json
    from pathlib import Path

    from safetensors import safe_open

    path = Path(directory) / ADAPTER_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{directory} holds no LoRA adapter ({ADAPTER_FILE}): it was saved without LoRA")
    with safe_open(str(path), framework="pt") as handle:
        meta = handle.metadata()
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    return LoraAdapter(tensors, int(meta["rank"]), float(meta["alpha"]), tuple(json.loads(meta["target_modules"])))
