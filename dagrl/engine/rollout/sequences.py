"""Turning generated tokens into the shared sequence layout (see dagrl/engine/base.py)."""

from __future__ import annotations

import torch

from dagrl.data.batch import Batch


def response_mask_from_tokens(responses: torch.Tensor, eos_token_ids: list[int]) -> torch.Tensor:
    """1 up to and including the first eos of each row, 0 after it."""
    is_eos = torch.isin(responses, torch.tensor(eos_token_ids, device=responses.device))
    eos_seen_before = (torch.cumsum(is_eos.int(), dim=1) - is_eos.int()) > 0
    return (~eos_seen_before).long()


def join_prompt_and_response(
    prompts: Batch,
    responses: torch.Tensor,
    response_length: int,
    eos_token_ids: list[int],
    pad_token_id: int,
    limits: torch.Tensor | None = None,
) -> Batch:
    """A batch with `responses` right-padded to `response_length` and the full sequence columns. `limits` [B]: where
    each row ends at the latest (its own limit, SamplingSpec.response_lengths, or its length): its tokens past it
    become padding, out of the mask even where the pad token is an eos, as for a row that stopped there for length."""
    rows, generated = responses.shape
    if generated < response_length:
        pad = torch.full((rows, response_length - generated), pad_token_id, dtype=responses.dtype)
        responses = torch.cat([responses, pad], dim=1)
    responses = responses[:, :response_length]
    response_mask = response_mask_from_tokens(responses, eos_token_ids)
    if limits is not None:
        response_mask = response_mask * (torch.arange(response_length)[None, :] < limits[:, None])
    responses = torch.where(response_mask.bool(), responses, torch.full_like(responses, pad_token_id))
    return assemble(prompts, responses, response_mask, response_mask)


def assemble(
    prompts: Batch, responses: torch.Tensor, response_mask: torch.Tensor, response_attention: torch.Tensor
) -> Batch:
    """`prompts` joined with right-padded `responses` [B, R]. `response_attention` marks the response's real tokens;
    `response_mask` the trained ones (the same in a single turn; a multi-turn response also holds observation
    tokens, attended to but never trained)."""
    prompt_ids, prompt_mask = prompts["input_ids"], prompts["attention_mask"]
    attention_mask = torch.cat([prompt_mask, response_attention.to(prompt_mask.dtype)], dim=1)
    position_ids = torch.clamp(torch.cumsum(attention_mask, dim=1) - 1, min=0)
    return prompts.union(
        Batch(
            {
                "prompts": prompt_ids,
                "responses": responses,
                "response_mask": response_mask,
                "input_ids": torch.cat([prompt_ids, responses], dim=1),
                "attention_mask": attention_mask,
                "position_ids": position_ids,
            }
        )
    )
