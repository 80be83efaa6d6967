"""Turning batches into vLLM requests and vLLM outputs back into the shared sequence layout.

Pure functions over plain objects (no vLLM import), so CPU tests cover them with recorded-shape fakes.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from dagrl.data.batch import Batch
from dagrl.engine.rollout.interface import Progress, Request, SamplingSpec
from dagrl.engine.rollout.sequences import join_prompt_and_response


def prompt_token_ids(prompts: Batch) -> list[list[int]]:
    """The unpadded prompt of every row (left padding removed with the attention mask)."""
    ids, mask = prompts["input_ids"], prompts["attention_mask"].bool()
    return [row[keep].tolist() for row, keep in zip(ids, mask)]


def request_seed(seed: int, row: int) -> int:
    """Each request's own sampler seed: fixed by the call's seed and the row, so a resumed run resamples exactly."""
    return zlib.crc32(f"{seed}/{row}".encode()) & 0x7FFFFFFF


@dataclass(frozen=True)
class RequestParams:
    """What one vLLM SamplingParams gets (kept as plain fields so tests need no vLLM)."""

    n: int
    temperature: float
    top_p: float
    top_k: int
    max_tokens: int
    seed: int
    stop_token_ids: tuple[int, ...]
    logprobs: int | None
    ignore_eos: bool = False

    def as_kwargs(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "stop_token_ids": list(self.stop_token_ids),
            "logprobs": self.logprobs,
            "detokenize": False,
            "skip_special_tokens": False,
            "ignore_eos": self.ignore_eos,
        }


def _params(
    sampling: SamplingSpec, n: int, max_tokens: int, seed: int, eos_token_ids: Sequence[int], with_log_probs: bool
) -> RequestParams:
    greedy = sampling.greedy
    return RequestParams(
        n=n,
        temperature=0.0 if greedy else sampling.temperature,
        top_p=1.0 if greedy else sampling.top_p,
        top_k=0 if greedy or sampling.top_k <= 0 else sampling.top_k,  # vLLM: 0 disables top-k
        max_tokens=max_tokens,
        seed=seed,
        stop_token_ids=tuple(sampling.stop_ids(eos_token_ids)),
        logprobs=0 if with_log_probs else None,  # 0: the sampled token's own log-prob only
        ignore_eos=sampling.ignore_eos,  # vLLM also stops at the model's own eos unless told not to
    )


def request_params(
    sampling: SamplingSpec, rows: int, seed: int, eos_token_ids: Sequence[int], with_log_probs: bool
) -> list[RequestParams]:
    return [
        _params(sampling, sampling.n, sampling.limit(row), request_seed(seed, row), eos_token_ids, with_log_probs)
        for row in range(rows)
    ]


def single_request_params(request: Request, eos_token_ids: Sequence[int]) -> RequestParams:
    """One request of the request level: one sequence, the budget left after its prefix, log-probs always."""
    return _params(request.sampling, 1, request.budget, request.stream_seed, eos_token_ids, with_log_probs=True)


def record_progress(progress: Progress, output: Any, version: int) -> str | None:
    """Append a vLLM RequestOutput's new tokens (output_kind=DELTA: only what this step generated; cumulative
    outputs would copy every request's whole response every step) to `progress`, tagged with `version`; the
    finish reason once it finished ("stop", "length", "abort"), else None."""
    completion = output.outputs[0]
    tokens = list(completion.token_ids)
    log_probs = _sampled_log_probs(completion) if completion.logprobs else []
    log_probs += [0.0] * (len(tokens) - len(log_probs))
    stop = completion.stop_reason  # a stop token vLLM matched but left out of token_ids still ends the response
    so_far = len(progress.token_ids) + len(tokens)
    last = tokens[-1] if tokens else (progress.token_ids[-1] if progress.token_ids else None)
    if output.finished and isinstance(stop, int) and last != stop and so_far < progress.request.budget:
        tokens.append(stop)
        log_probs.append(0.0)
    progress.token_ids.extend(tokens)
    progress.log_probs.extend(log_probs[: len(tokens)])
    progress.versions.extend([version] * len(tokens))
    return (completion.finish_reason or "stop") if output.finished else None


def _sampled_log_probs(completion: Any) -> list[float]:
    """The log-prob of each sampled token; vLLM gives one {token_id: Logprob} dict per position."""
    return [float(step[token].logprob) for token, step in zip(completion.token_ids, completion.logprobs)]


def unpack_outputs(
    prompts: Batch,
    outputs: Sequence[Any],
    sampling: SamplingSpec,
    eos_token_ids: Sequence[int],
    pad_token_id: int,
    with_log_probs: bool,
) -> Batch:
    """Request outputs (one per prompt row, each with n completions) → rows [p0 r0, p0 r1, …, p1 r0, …]."""
    if len(outputs) != len(prompts):
        raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(prompts)} prompts")
    length = sampling.response_length
    # Gathered into flat lists and written with one masked assignment: a tensor per completion costs more than
    # the rest of the unpacking together (1024 completions: ~45 ms).
    flat_tokens: list[int] = []
    flat_log_probs: list[float] = []
    lengths: list[int] = []
    for row, output in enumerate(outputs):
        completions = sorted(output.outputs, key=lambda c: c.index)
        if len(completions) != sampling.n:
            raise RuntimeError(f"vLLM returned {len(completions)} completions for a prompt, expected n={sampling.n}")
        limit = sampling.limit(row)
        for completion in completions:
            tokens = list(completion.token_ids)[:limit]
            # a stop token vLLM matched but left out of token_ids still ends the response, as eos does in HF
            stop = completion.stop_reason
            if isinstance(stop, int) and (not tokens or tokens[-1] != stop) and len(tokens) < limit:
                tokens.append(stop)
            flat_tokens.extend(tokens)
            lengths.append(len(tokens))
            if with_log_probs:
                values = _sampled_log_probs(completion)[: len(tokens)]
                flat_log_probs.extend(values + [0.0] * (len(tokens) - len(values)))
    counts = torch.tensor(lengths, dtype=torch.long)
    filled = torch.arange(length)[None, :] < counts[:, None]
    responses = torch.full((len(prompts) * sampling.n, length), pad_token_id, dtype=torch.long)
    responses[filled] = torch.from_numpy(np.array(flat_tokens, dtype=np.int64))  # 3x torch.tensor(list)'s speed
    log_probs = torch.zeros(responses.shape, dtype=torch.float32)
    if with_log_probs:
        log_probs[filled] = torch.from_numpy(np.array(flat_log_probs, dtype=np.float32))
    expanded = prompts.repeat_interleave(sampling.n) if sampling.n > 1 else prompts
    batch = join_prompt_and_response(
        expanded, responses, length, sampling.stop_ids(eos_token_ids), pad_token_id, counts
    )
    if with_log_probs:
        batch["rollout_log_probs"] = log_probs * batch["response_mask"]
    return batch
