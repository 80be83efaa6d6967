"""Megatron -> HF: the actor's weights as full HF-named tensors, streamed in buckets (the weight sync into the
rollout engine and the HF export). Each parameter's shards are gathered over its TP group (many parameters in one
collective), experts over the EP group, and each PP stage broadcasts what it owns; weights.py's rules say what
each parameter holds.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

import torch
import torch.distributed as dist

from dagrl.engine.megatron.weights import (
    ADAPTER_SUFFIXES,
    LAYER,
    Rule,
    full_hf_tensors,
    local_expert,
    parallel_ranks,
    rule_for,
)
from dagrl.engine.rollout.interface import WeightBucket


def _gather_shards(params: list[torch.Tensor], expert: bool) -> list[list[torch.Tensor]]:
    """Every TP rank's shard of each parameter, in one collective for all of them (a call per tensor costs more
    than the bytes it moves: 112 small all-gathers made a 1.7B sync 6x its bound)."""
    _, size, group = parallel_ranks(expert)
    if size == 1:
        return [[param] for param in params]
    flat = torch.cat([param.reshape(-1) for param in params])
    out = torch.empty(size, flat.numel(), dtype=flat.dtype, device=flat.device)
    if dist.get_backend(group) == "nccl":
        dist.all_gather_into_tensor(out, flat, group=group)
    else:  # gloo has no all_gather_into_tensor
        dist.all_gather(list(out.unbind(0)), flat, group=group)
    parts, offset = [], 0
    for param in params:
        parts.append([row[offset : offset + param.numel()].view(param.shape) for row in out])
        offset += param.numel()
    return parts


ExportEntry = tuple[torch.nn.Module, str, Rule, torch.nn.Parameter]  # chunk, local name, rule, parameter


def export_entries(chunks: list[torch.nn.Module], hf_config: Any) -> list[ExportEntry]:
    """Every exported local parameter with its rule, in one order on every rank. Fixed for an engine's life (the
    offload moves storages, not parameters), so the engine builds it once: the module walks and rule lookups cost
    a 1.7B sync more CPU time than its all-gather takes on the GPU."""
    tied = bool(getattr(hf_config, "tie_word_embeddings", False))
    entries = []
    for chunk in chunks:
        for name, param in chunk.named_parameters():
            if name.endswith(ADAPTER_SUFFIXES):
                continue
            rule = rule_for(chunk, name, tied, getattr(hf_config, "model_type", None))
            if rule is not None:
                entries.append((chunk, name, rule, param))
    return entries


def _local_hf_tensors(
    entries: list[ExportEntry], hf_config: Any, gather_bytes: int
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Per local parameter: its full HF tensors, expert tensors gathered over the EP group. TP shards are gathered
    for groups of parameters of about `gather_bytes` (full size) at a time."""
    from megatron.core import parallel_state as ps

    ep_size = ps.get_expert_model_parallel_world_size()
    split_over = {expert: parallel_ranks(expert)[1] for expert in (False, True)}
    pending: list[tuple[torch.nn.Module, str, Rule, torch.Tensor]] = []

    def convert() -> Iterator[list[tuple[str, torch.Tensor]]]:
        parts: dict[int, list[torch.Tensor]] = {}
        for expert in (False, True):
            for dtype in sorted({param.dtype for *_, param in pending}, key=str):  # one order on every rank
                group = [
                    (i, param)
                    for i, (_, _, rule, param) in enumerate(pending)
                    if rule.expert == expert and rule.kind != "copy" and param.dtype == dtype
                ]
                if group:
                    parts.update(zip([i for i, _ in group], _gather_shards([p for _, p in group], expert)))
        for i, (chunk, name, rule, param) in enumerate(pending):
            tensors = full_hf_tensors(rule, parts.get(i, [param]), hf_config)
            if rule.expert and ep_size > 1:
                tensors = _gather_experts(tensors, chunk, name)
            yield tensors
        pending.clear()

    size = 0
    for chunk, name, rule, param in entries:
        pending.append((chunk, name, rule, param.detach()))
        size += param.numel() * param.element_size() * split_over[rule.expert]
        if size >= gather_bytes:
            yield from convert()
            size = 0
    yield from convert()


def _gather_experts(
    tensors: list[tuple[str, torch.Tensor]], chunk: torch.nn.Module, name: str
) -> list[tuple[str, torch.Tensor]]:
    """Every EP rank holds other experts at the same local index: gather them and name them globally."""
    from megatron.core import parallel_state as ps

    ep_size, group = ps.get_expert_model_parallel_world_size(), ps.get_expert_model_parallel_group()
    layer_match = LAYER.match(name)
    num_local = chunk.decoder.layers[int(layer_match.group(1))].mlp.experts.num_local_experts
    index, _ = local_expert(layer_match.group(2))
    out = []
    for hf_name, tensor in tensors:
        parts = [torch.empty_like(tensor) for _ in range(ep_size)]
        dist.all_gather(parts, tensor.contiguous(), group=group)
        for ep_rank, part in enumerate(parts):
            expert_id = ep_rank * num_local + index
            out.append((re.sub(r"\.experts\.\d+\.", f".experts.{expert_id}.", hf_name), part))
    return out


def _pipeline_stream(
    chunks: list[torch.nn.Module], entries: list[ExportEntry], hf_config: Any, gather_bytes: int
) -> Iterator[tuple[str, torch.Tensor]]:
    """Every HF tensor of the whole model on every rank: each PP stage in turn broadcasts what it owns."""
    from megatron.core import parallel_state as ps

    pp_size = ps.get_pipeline_model_parallel_world_size()
    if pp_size == 1:
        for tensors in _local_hf_tensors(entries, hf_config, gather_bytes):
            yield from tensors
        return
    group = ps.get_pipeline_model_parallel_group()
    ranks = dist.get_process_group_ranks(group)
    my_stage = ps.get_pipeline_model_parallel_rank()
    for stage in range(pp_size):
        source = _local_hf_tensors(entries, hf_config, gather_bytes) if stage == my_stage else None
        while True:
            tensors = next(source, None) if source is not None else None
            meta = [None if tensors is None else [(n, tuple(t.shape), t.dtype) for n, t in tensors]]
            dist.broadcast_object_list(meta, src=ranks[stage], group=group)
            if meta[0] is None:  # the owning stage is done
                break
            if tensors is None:
                tensors = [
                    (n, torch.empty(shape, dtype=dtype, device=_device_of(chunks))) for n, shape, dtype in meta[0]
                ]
            for _, tensor in tensors:
                dist.broadcast(tensor, src=ranks[stage], group=group)
            yield from tensors


def _device_of(chunks: list[torch.nn.Module]) -> torch.device:
    return next(chunks[0].parameters()).device


def export_hf_weights(
    chunks: list[torch.nn.Module], hf_config: Any, bucket_bytes: int, entries: list[ExportEntry] | None = None
) -> Iterator[WeightBucket]:
    """Full HF-named tensors in buckets of at most `bucket_bytes` (a larger tensor is a bucket of its own);
    `entries`: `export_entries(chunks, hf_config)`, when the caller keeps it.

    Collective: every rank must iterate it to the end; every rank receives every tensor."""
    entries = export_entries(chunks, hf_config) if entries is None else entries
    bucket: WeightBucket = []
    size = 0
    for name, tensor in _pipeline_stream(chunks, entries, hf_config, gather_bytes=bucket_bytes):
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket
