"""Turn the rollout layout (left-padded prompt + right-padded response) into Megatron micro-batches.

Each row's valid prompt tokens are moved to the front and followed by its response up to the last response-mask
token, `length` tokens in all, so a causal model at positions 0..length-1 reproduces the left-padded forward. The
logit predicting response token t sits at position (valid prompt length + t - 1). Two layouts:
- padded: a micro-batch is a [rows, S] block, rows right-padded to S (plain causal attention);
- packed (remove padding): a micro-batch is one [1, T] row of concatenated sequences (segments), each padded to
  a multiple of `align_each`, with positions restarting at 0 per segment. On GPU with TransformerEngine it goes
  in as THD (`PackedSeqParams`, context-parallel split when CP > 1); otherwise as one row with a block-diagonal
  causal attention mask (a [T, T] mask and attention scores: fine on CPU and for short rows, quadratic in T).
Only real rows enter a micro-batch's outputs: `logit_row`/`logit_pos` name, for every real row and response
token, where its logit is; the caller scatters results back by `index`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from dagrl.data.batch import Batch
from dagrl.engine.megatron import packing


@dataclass
class MicroBatch:
    tokens: torch.Tensor  # [b, S] input ids on this rank (the local tokens under context parallelism)
    position_ids: torch.Tensor  # [b, S]
    logit_row: torch.Tensor  # [rows] row of `tokens` holding each real row (0 when packed)
    logit_pos: torch.Tensor  # [rows, R] local position of the logit predicting each response token
    targets: torch.Tensor  # [rows, R] response token ids
    response_mask: torch.Tensor  # [rows, R]
    index: torch.Tensor  # [rows] the rows' indices in the caller's batch (CPU)
    batch: Batch  # those rows of the caller's batch, for the loss function
    seq_length: int  # S before any context-parallel split (what Megatron's schedule is told)
    attention_mask: torch.Tensor | None = None  # packed without TE: [1, 1, S, S] bool, True = masked
    packed_seq_params: Any = None  # packed with TE: THD description of the row
    held: torch.Tensor | None = None  # context parallel: [rows, R] bool, this rank holds that logit
    routes: torch.Tensor | None = None  # [b, S, layers, top_k] the batch's routed_experts at `tokens`; -1: none
    starts: torch.Tensor | None = None  # [rows] where each real row starts in its row of `tokens` (packed: > 0)
    _kept: tuple | None = None

    @property
    def rows(self) -> int:
        return len(self.index)

    def kept(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(row, response position) of each response token whose logit this rank computes: real tokens only, so the
        vocabulary projection and the log-prob math scale with the micro-batch's token budget, not with rows x its
        longest response (one 8k response among short ones made that 14 GB of float32 logits). Found on the host
        when the micro-batch is built: a nonzero() on the device would stall the CPU at every forward."""
        if self._kept is None:
            self._kept = kept_positions(
                self.response_mask.cpu(), None if self.held is None else self.held.cpu(), self.response_mask.device
            )
        return self._kept


def kept_positions(
    response_mask: torch.Tensor, held: torch.Tensor | None, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """`MicroBatch.kept` of host tensors, on `device`."""
    keep = response_mask.bool() if held is None else response_mask.bool() & held
    rows, cols = keep.nonzero(as_tuple=True)
    return rows.to(device), cols.to(device)


@dataclass
class RowLayout:
    """Per-row facts of a batch, computed once per engine call."""

    tokens: torch.Tensor  # [B, P + R] valid prompt tokens, then the whole response, then zeros (CPU)
    prompt_lens: torch.Tensor  # [B]
    lengths: torch.Tensor  # [B] valid prompt + response up to its last mask token
    columns: torch.Tensor  # [B, P + R] the input_ids column of each `tokens` position; -1 past the row's length
    routes: torch.Tensor | None = None  # [B, P + R, layers, top_k] routed_experts in the `tokens` order; -1: none

    @classmethod
    def of(cls, batch: Batch) -> "RowLayout":
        input_ids, responses = batch["input_ids"].cpu(), batch["responses"].cpu()
        response_len = responses.shape[1]
        prompt_mask = batch["attention_mask"][:, : input_ids.shape[1] - response_len].cpu().bool()
        prompt_lens = prompt_mask.sum(dim=1)
        if len(batch) and int(prompt_lens.min()) == 0:
            raise ValueError("a row has no prompt token (attention_mask is 0 over the whole prompt)")
        mask = batch["response_mask"].cpu().bool()
        last = (
            torch.where(mask, torch.arange(1, response_len + 1), 0).amax(dim=1)
            if response_len
            else torch.zeros(len(batch), dtype=torch.long)
        )
        tokens = torch.zeros(len(batch), input_ids.shape[1], dtype=torch.long)
        columns = torch.full_like(tokens, -1)
        prompt_len = input_ids.shape[1] - response_len
        for row in range(len(batch)):
            prompt = input_ids[row, :prompt_len][prompt_mask[row]]
            tokens[row, : len(prompt)] = prompt
            tokens[row, len(prompt) : len(prompt) + response_len] = responses[row]
            columns[row, : len(prompt)] = prompt_mask[row].nonzero().squeeze(1)
            columns[row, len(prompt) : len(prompt) + response_len] = torch.arange(prompt_len, input_ids.shape[1])
        lengths = prompt_lens + last
        columns[torch.arange(columns.shape[1])[None, :] >= lengths[:, None]] = -1
        routes = None
        if "routed_experts" in batch:  # each token's routes follow it: -1 where no token is
            source = batch["routed_experts"].cpu()
            routes = source[torch.arange(len(batch))[:, None], columns.clamp(min=0)]
            routes[columns < 0] = -1
        return cls(tokens=tokens, prompt_lens=prompt_lens, lengths=lengths, columns=columns, routes=routes)

    def logit_positions(self, index: list[int], response_len: int) -> torch.Tensor:
        """[rows, R] position, within each row, of the logit predicting response token t (clamped to the row's
        last token past its response: those positions are off the response mask)."""
        rows = torch.as_tensor(index, dtype=torch.long)
        wanted = self.prompt_lens[rows, None] - 1 + torch.arange(response_len)[None, :]
        return torch.minimum(wanted, self.lengths[rows, None] - 1)


def _outputs(batch: Batch, index: list[int], device: torch.device, held: torch.Tensor | None = None) -> dict[str, Any]:
    """The MicroBatch fields every layout shares; `held` (CPU) under context parallelism."""
    rows = torch.as_tensor(index, dtype=torch.long)
    response_mask = batch["response_mask"].cpu()[rows]
    return dict(
        targets=batch["responses"].cpu()[rows].long().to(device),
        response_mask=response_mask.to(device),
        index=rows,
        batch=batch.select(index).to(device),
        _kept=kept_positions(response_mask, held, device),
        held=None if held is None else held.to(device),
    )


def padded_micro_batch(
    batch: Batch, layout: RowLayout, index: list[int], rows: int, seq_len: int, device: torch.device
) -> MicroBatch:
    """Rows `index` of `batch` as a [rows, seq_len] block (dummy rows beyond len(index) never reach a loss)."""
    if len(index) > rows or (index and seq_len < int(layout.lengths[index].max())):
        raise ValueError(f"{len(index)} rows do not fit a [{rows}, {seq_len}] micro-batch")
    tokens = torch.zeros(rows, seq_len, dtype=torch.long)
    width = min(seq_len, layout.tokens.shape[1])
    tokens[: len(index), :width] = layout.tokens[index, :width]
    routes = None
    if layout.routes is not None:
        routes = layout.routes.new_full((rows, seq_len, *layout.routes.shape[2:]), -1)
        routes[: len(index), :width] = layout.routes[index, :width]
    return MicroBatch(
        tokens=tokens.to(device),
        position_ids=torch.arange(seq_len, device=device).unsqueeze(0).expand(rows, -1),
        logit_row=torch.arange(len(index), device=device),
        logit_pos=layout.logit_positions(index, batch["responses"].shape[1]).to(device),
        seq_length=seq_len,
        routes=None if routes is None else routes.to(device),
        starts=torch.zeros(len(index), dtype=torch.long, device=device),
        **_outputs(batch, index, device),
    )


@dataclass(frozen=True)
class PackSpec:
    """How one packed row is laid out on this rank."""

    align_each: int = 1  # each segment padded to a multiple of this (2 x CP x SP-TP under CP)
    align_total: int = 1  # the row's length a multiple of this (TP under sequence parallelism)
    cp_size: int = 1
    cp_rank: int = 0
    thd: bool = False  # TransformerEngine THD (PackedSeqParams) rather than a block-diagonal mask


def packed_micro_batch(
    batch: Batch, layout: RowLayout, index: list[int], total: int, spec: PackSpec, device: torch.device
) -> MicroBatch:
    """Rows `index` of `batch` concatenated into one packed row of `total` tokens (before any CP split).

    With no rows (a dummy micro-batch that only keeps ranks in step) the row is one segment of padding."""
    lengths = [int(layout.lengths[i]) for i in index] or [spec.align_each]
    segments = packing.segment_lengths(lengths, spec.align_each, spec.align_total, min_total=total)
    if sum(segments) != total:
        raise ValueError(f"rows need {sum(segments)} packed tokens, more than the {total} planned")
    starts = packing.cumulative(segments)[:-1]
    tokens = torch.zeros(total, dtype=torch.long)
    routes = None if layout.routes is None else layout.routes.new_full((total, *layout.routes.shape[2:]), -1)
    for start, row in zip(starts, index):
        tokens[start : start + int(layout.lengths[row])] = layout.tokens[row, : int(layout.lengths[row])]
        if routes is not None:
            routes[start : start + int(layout.lengths[row])] = layout.routes[row, : int(layout.lengths[row])]
    positions = packing.restart_positions(segments)
    offsets = torch.as_tensor(starts[: len(index)], dtype=torch.long)
    logit_pos = layout.logit_positions(index, batch["responses"].shape[1]) + offsets[:, None]
    held = None
    if spec.cp_size > 1:  # keep this rank's chunks; map each logit to its local position
        local = packing.context_parallel_positions(segments, spec.cp_size, spec.cp_rank)
        tokens, positions = tokens[local], positions[local]
        routes = None if routes is None else routes[local]
        logit_pos, held = packing.context_parallel_index(logit_pos, segments, spec.cp_size, spec.cp_rank)
    return MicroBatch(
        tokens=tokens.unsqueeze(0).to(device),
        position_ids=positions.unsqueeze(0).to(device),
        logit_row=torch.zeros(len(index), dtype=torch.long, device=device),
        logit_pos=logit_pos.to(device),
        seq_length=total,
        routes=None if routes is None else routes.unsqueeze(0).to(device),
        starts=offsets.to(device),
        attention_mask=None if spec.thd else packing.block_causal_mask(segments).to(device),
        packed_seq_params=packing.thd_packed_seq_params(segments, device) if spec.thd else None,
        **_outputs(batch, index, device, held),
    )


def packed_total(layout: RowLayout, index: list[int], spec: PackSpec) -> int:
    """The packed length rows `index` need (one segment of padding for an empty micro-batch)."""
    lengths = [int(layout.lengths[i]) for i in index] or [spec.align_each]
    return sum(packing.segment_lengths(lengths, spec.align_each, spec.align_total))


def padded_length(layout: RowLayout, index: list[int], seq_multiple: int) -> int:
    """The shortest S, a multiple of `seq_multiple`, that holds rows `index` (one multiple when empty)."""
    longest = int(layout.lengths[index].max()) if index else 1
    return -(-longest // seq_multiple) * seq_multiple


def pack_spec(thd: bool, sequence_parallel: bool) -> PackSpec:
    """This rank's packed-row layout: under context parallelism every segment splits into 2 x CP chunks, each
    chunk a multiple of TP under sequence parallelism; otherwise only the row's total must split over TP."""
    from megatron.core import parallel_state as ps

    tp = ps.get_tensor_model_parallel_world_size() if sequence_parallel else 1
    cp = ps.get_context_parallel_world_size()
    align = 2 * cp * tp if cp > 1 else 1
    return PackSpec(
        align_each=align,
        align_total=align if cp > 1 else tp,
        cp_size=cp,
        cp_rank=ps.get_context_parallel_rank(),
        thd=thd,
    )


def _agreed_bins(make_bins: Any, multiple: int, device: torch.device) -> list[list[int]]:
    """Bins from `make_bins(min_bins)` whose count is the same on every DP rank (ranks short of bins add empty
    ones) and a multiple of `multiple`: expert-parallel token exchanges run once per micro-batch on all DP ranks,
    and the interleaved pipeline schedule wants whole groups of PP micro-batches."""
    from megatron.core import parallel_state as ps

    bins = make_bins(0)
    while True:
        count = max(-(-len(bins) // multiple) * multiple, multiple)
        counts = torch.tensor([count, -count], device=device)
        if ps.get_data_parallel_world_size() > 1:
            dist.all_reduce(counts, op=dist.ReduceOp.MAX, group=ps.get_data_parallel_group())
        high, low = int(counts[0]), -int(counts[1])
        if len(bins) == high == low:
            return bins
        bins = make_bins(high)


def plan_micro_batches(
    batch: Batch,
    micro_batch_size: int,
    max_token_len: int | None,
    *,
    device: torch.device,
    pack: PackSpec | None,
    seq_multiple: int,
) -> tuple[list[MicroBatch], bool]:
    """This rank's micro-batches of `batch`, and whether their shapes vary (pipeline stages must then exchange
    shapes: Megatron's `variable_seq_lengths`).

    Rows: `micro_batch_size` consecutive rows per micro-batch, or with `max_token_len` (dynamic batch size) a
    token budget: each micro-batch's real tokens (valid prompt + response) sum to at most max_token_len x CP (a
    longer row alone), balanced by length. Every DP rank runs the same number of micro-batches.
    Shapes (Megatron's schedule takes one micro_batch_size and seq_length per call):
    - fixed micro-batches, padded: one [micro_batch_size, S] for all micro-batches and DP ranks, S the longest
      row's length (as before dynamic batching: equal shapes keep DP ranks' numerics alike);
    - dynamic or packed: each micro-batch its own shape, [rows, longest row] padded or [1, packed length]
      packed, exchanged between pipeline stages as they go (variable_seq_lengths). Two exceptions: with
      virtual pipeline stages one shape per call (the interleaved schedule can post two shape messages to the
      same peer at once, which could pair up wrongly), and with expert parallelism the shapes of the i-th
      micro-batches agree across DP ranks (CPU's all-gather token dispatcher needs equal sizes).
    With sequence parallelism S is a multiple of TP. Rows come back in `MicroBatch.index` for the caller to
    restore the batch's order."""
    from megatron.core import parallel_state as ps

    layout = RowLayout.of(batch)
    lengths = layout.lengths.tolist()
    cp = pack.cp_size if pack is not None else 1

    def make_bins(min_bins: int) -> list[list[int]]:
        if max_token_len:
            return packing.token_budget_bins(lengths, max_token_len * cp, min_bins)
        return packing.fixed_bins(len(batch), micro_batch_size, min_bins)

    vpp = (ps.get_virtual_pipeline_model_parallel_world_size() or 1) > 1
    bins = _agreed_bins(make_bins, ps.get_pipeline_model_parallel_world_size() if vpp else 1, device)
    fixed_padded = not max_token_len and pack is None
    if pack is not None:
        shapes = [[1, packed_total(layout, b, pack)] for b in bins]
    elif fixed_padded:
        shapes = [[micro_batch_size, padded_length(layout, list(range(len(batch))), seq_multiple)]] * len(bins)
    else:
        shapes = [[max(len(b), 1), padded_length(layout, b, seq_multiple)] for b in bins]
    if vpp:
        shapes = [[max(s[0] for s in shapes), max(s[1] for s in shapes)]] * len(shapes)
    if ps.get_data_parallel_world_size() > 1 and (fixed_padded or ps.get_expert_model_parallel_world_size() > 1):
        agreed = torch.tensor(shapes, device=device)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=ps.get_data_parallel_group())
        shapes = agreed.tolist()
    if pack is not None:
        micro_batches = [
            packed_micro_batch(batch, layout, b, total, pack, device) for b, (_, total) in zip(bins, shapes)
        ]
    else:
        micro_batches = [
            padded_micro_batch(batch, layout, b, rows, seq_len, device) for b, (rows, seq_len) in zip(bins, shapes)
        ]
    varies = len({tuple(s) for s in shapes}) > 1 and ps.get_pipeline_model_parallel_world_size() > 1
    return micro_batches, varies
