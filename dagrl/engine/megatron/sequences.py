"""Turn the rollout layout (left-padded prompt + right-padded response) into Megatron micro-batches.

Each row's valid prompt tokens are moved to the front and followed by the whole response, so a plain causal
mask with position ids 0..S-1 reproduces the left-padded forward. The logit predicting response token t sits at
position (valid prompt length + t - 1). Rows are right-padded to one length for the whole batch (pipeline
stages exchange fixed shapes), a multiple of TP (sequence parallel splits it), and each micro-batch is padded
with dummy rows to `micro_batch_size` rows; dummy rows never reach a loss.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from dagrl.data.batch import Batch


@dataclass
class MicroBatch:
    tokens: torch.Tensor         # [b, S] packed input ids
    position_ids: torch.Tensor   # [b, S]
    logit_index: torch.Tensor    # [b, R] position of the logit predicting each response token
    targets: torch.Tensor        # [b, R] response token ids
    response_mask: torch.Tensor  # [b, R]
    rows: int                    # real rows (the first `rows` of b)
    batch: Batch                 # the real rows of the caller's batch, for the loss function


def packed_length(batch: Batch, seq_multiple: int) -> int:
    """The shortest common sequence length S that holds every row of `batch`, a multiple of `seq_multiple`."""
    response_len = batch["responses"].shape[1]
    prompt_lens = batch["attention_mask"][:, : batch["input_ids"].shape[1] - response_len].sum(dim=1)
    if int(prompt_lens.min()) == 0:
        raise ValueError("a row has no prompt token (attention_mask is 0 over the whole prompt)")
    seq_len = int(prompt_lens.max()) + response_len
    return -(-seq_len // seq_multiple) * seq_multiple


def pack_micro_batches(batch: Batch, micro_batch_size: int, seq_len: int,
                       device: torch.device) -> list[MicroBatch]:
    """Micro-batches of `batch`, every row padded to `seq_len` (at least `packed_length(batch, ...)`)."""
    if micro_batch_size <= 0:
        raise ValueError(f"micro_batch_size must be positive, got {micro_batch_size}")
    input_ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    responses, response_mask = batch["responses"], batch["response_mask"]
    response_len = responses.shape[1]
    prompt_len = input_ids.shape[1] - response_len
    prompt_mask = attention_mask[:, :prompt_len].bool()
    prompt_lens = prompt_mask.sum(dim=1)
    if seq_len < int(prompt_lens.max()) + response_len:
        raise ValueError(f"seq_len {seq_len} is shorter than the longest packed row")

    rows = len(batch)
    tokens = torch.zeros(rows, seq_len, dtype=torch.long)
    for row in range(rows):
        prompt = input_ids[row, :prompt_len][prompt_mask[row]]
        tokens[row, : len(prompt)] = prompt.cpu()
        tokens[row, len(prompt): len(prompt) + response_len] = responses[row].cpu()
    logit_index = (prompt_lens.cpu().unsqueeze(1) - 1 + torch.arange(response_len).unsqueeze(0))

    micro_batches = []
    for start in range(0, rows, micro_batch_size):
        stop = min(start + micro_batch_size, rows)
        pad = micro_batch_size - (stop - start)

        def padded(tensor: torch.Tensor) -> torch.Tensor:
            piece = tensor[start:stop]
            if pad:
                piece = torch.cat([piece, torch.zeros(pad, *piece.shape[1:], dtype=piece.dtype)])
            return piece.to(device)

        micro_batches.append(MicroBatch(
            tokens=padded(tokens),
            position_ids=torch.arange(seq_len, device=device).unsqueeze(0).expand(micro_batch_size, -1),
            logit_index=padded(logit_index),
            targets=padded(responses.cpu().long()),
            response_mask=padded(response_mask.cpu()),
            rows=stop - start,
            batch=batch.slice(start, stop).to(device),  # the loss function's columns, beside its log-probs
        ))
    return micro_batches
