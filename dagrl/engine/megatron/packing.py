"""Pure functions on sequence lengths: token-budget micro-batches, packed (THD) layouts and context-parallel splits.

Nothing here imports megatron at module level, so the functions are unit-tested on CPU without a model:
- `token_budget_bins` / `fixed_bins`: which rows form each micro-batch (dynamic or fixed batch size);
- `segment_lengths`, `block_causal_mask`, `restart_positions`: one packed row holding several sequences;
- `context_parallel_positions` / `context_parallel_index`: Megatron's load-balanced context-parallel split of a
  packed row and the maps back to global positions;
- `thd_packed_seq_params`: the GPU (TransformerEngine) description of a packed row;
- `context_parallel_sum`: sums per-token results over the CP group, with an identity backward.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
import torch.distributed as dist


def fixed_bins(rows: int, size: int, min_bins: int = 0) -> list[list[int]]:
    """Consecutive micro-batches of `size` rows (the last may be shorter), then empty ones up to `min_bins`."""
    if size <= 0:
        raise ValueError(f"micro_batch_size must be positive, got {size}")
    bins = [list(range(start, min(start + size, rows))) for start in range(0, rows, size)]
    return bins + [[] for _ in range(min_bins - len(bins))]


def token_budget_bins(lengths: Sequence[int], budget: int, min_bins: int = 0) -> list[list[int]]:
    """Row indices grouped into micro-batches of at most `budget` summed tokens, balanced by total length.

    A row longer than the budget gets a micro-batch of its own. The others are spread over as few bins as the
    budget allows (at least `min_bins` in all) by longest-first greedy: each row goes to the currently lightest
    bin; if it does not fit there it fits nowhere, so one more bin is opened and the packing restarts. Bins hold
    their rows in the original order; bins left empty (fewer rows than `min_bins`) come last."""
    if budget <= 0:
        raise ValueError(f"token budget must be positive, got {budget}")
    alone = [[i] for i, length in enumerate(lengths) if length > budget]
    rest = sorted((i for i, length in enumerate(lengths) if length <= budget), key=lambda i: (-lengths[i], i))
    count = max(math.ceil(sum(lengths[i] for i in rest) / budget), min_bins - len(alone), 1 if rest else 0)
    while True:
        bins: list[list[int]] = [[] for _ in range(count)]
        loads = [0] * count
        for i in rest:
            lightest = min(range(count), key=lambda b: (loads[b], b))
            if loads[lightest] + lengths[i] > budget:
                break
            bins[lightest].append(i)
            loads[lightest] += lengths[i]
        else:
            break
        count += 1
    filled = alone + [sorted(b) for b in bins if b]
    return filled + [[] for _ in range(max(min_bins, len(alone) + count) - len(filled))]


def segment_lengths(lengths: Sequence[int], align_each: int, align_total: int, min_total: int = 0) -> list[int]:
    """Padded lengths of the sequences of one packed row: each rounded up to a multiple of `align_each`, the
    last one then grown so that the total is a multiple of `align_total` and at least `min_total` (which must
    itself be a multiple of `align_total`, e.g. a total agreed with other ranks)."""
    if not lengths:
        raise ValueError("a packed row needs at least one sequence")
    padded = [-(-int(n) // align_each) * align_each for n in lengths]
    total = max(-(-sum(padded) // align_total) * align_total, min_total)
    if total % align_total:
        raise ValueError(f"packed length {total} is not a multiple of {align_total}")
    padded[-1] += total - sum(padded)
    return padded


def cumulative(lengths: Sequence[int]) -> list[int]:
    """[0, l0, l0+l1, ...]: the cu_seqlens of a packed row."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + int(n))
    return out


def block_causal_mask(segments: Sequence[int]) -> torch.Tensor:
    """[1, 1, T, T] bool, True where attention is masked: a token sees earlier tokens of its own segment only.

    What Megatron's local attention applies when given this mask (it fills masked scores with -10000 before the
    softmax, as it does for its own causal mask), i.e. the packed row behaves as separate causal sequences."""
    segment_of = torch.repeat_interleave(torch.arange(len(segments)), torch.as_tensor(list(segments)))
    position = torch.arange(len(segment_of))
    allowed = (segment_of[:, None] == segment_of[None, :]) & (position[None, :] <= position[:, None])
    return (~allowed)[None, None]


def restart_positions(segments: Sequence[int]) -> torch.Tensor:
    """[T] position of each token within its own segment (0, 1, ..., 0, 1, ...)."""
    starts = torch.as_tensor(cumulative(segments)[:-1])
    segment_of = torch.repeat_interleave(torch.arange(len(segments)), torch.as_tensor(list(segments)))
    return torch.arange(len(segment_of)) - starts[segment_of]


def context_parallel_positions(segments: Sequence[int], cp_size: int, cp_rank: int) -> torch.Tensor:
    """The global positions of a packed row that CP rank `cp_rank` holds, in its local order.

    Each segment (padded to a multiple of 2*cp_size) is cut into 2*cp_size equal chunks; rank r keeps chunks r and
    2*cp_size-1-r, in that order, segment after segment. Pairing an early chunk with a late one evens out causal
    attention work across ranks (Megatron/TransformerEngine's THD layout for context parallelism)."""
    pieces = []
    for start, length in zip(cumulative(segments), segments):
        if length % (2 * cp_size):
            raise ValueError(f"segment of length {length} is not a multiple of 2 x CP = {2 * cp_size}")
        chunk = length // (2 * cp_size)
        for part in (cp_rank, 2 * cp_size - 1 - cp_rank):
            pieces.append(torch.arange(start + part * chunk, start + (part + 1) * chunk))
    return torch.cat(pieces)


def context_parallel_index(
    global_positions: torch.Tensor, segments: Sequence[int], cp_size: int, cp_rank: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """For global positions of any shape: (local index on `cp_rank`, 0 where not held; held mask)."""
    total = sum(segments)
    local_of = torch.full((total,), -1, dtype=torch.long)
    held_positions = context_parallel_positions(segments, cp_size, cp_rank)
    local_of[held_positions] = torch.arange(len(held_positions))
    local = local_of[global_positions]
    held = local >= 0
    return local.clamp(min=0), held


def thd_packed_seq_params(segments: Sequence[int], device: torch.device) -> Any:
    """Megatron's PackedSeqParams for one packed row (TransformerEngine attention, qkv_format "thd").

    The padded segment boundaries serve as the sequence boundaries: padding sits after a sequence's real tokens,
    so under the causal mask no real token sees it, and TE gets the per-2*CP-aligned lengths context parallelism
    needs. The `*_padded` fields are filled where the installed megatron-core has them."""
    import dataclasses

    from megatron.core.packed_seq_params import PackedSeqParams

    cu_seqlens = torch.tensor(cumulative(segments), dtype=torch.int32, device=device)
    longest = int(max(segments))
    kwargs = dict(
        qkv_format="thd", cu_seqlens_q=cu_seqlens, cu_seqlens_kv=cu_seqlens, max_seqlen_q=longest, max_seqlen_kv=longest
    )
    fields = {f.name for f in dataclasses.fields(PackedSeqParams)}
    for name in ("cu_seqlens_q_padded", "cu_seqlens_kv_padded"):
        if name in fields:
            kwargs[name] = cu_seqlens
    return PackedSeqParams(**kwargs)


class _SumOverGroup(torch.autograd.Function):
    """All-reduce (sum) forward, identity backward: every rank of the group then holds the whole result and
    computes the same loss from it; each rank's backward reaches only its own contribution."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        out = tensor.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def context_parallel_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum per-token results that each CP rank filled for its own tokens (zeros elsewhere) over the CP group."""
    from megatron.core import parallel_state as ps

    if ps.get_context_parallel_world_size() == 1:
        return tensor
    return _SumOverGroup.apply(tensor, ps.get_context_parallel_group())
