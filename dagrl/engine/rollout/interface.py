"""What every rollout engine (hf, vllm) offers, and the types the trainer, the data code and the actor's weight export
share with it.

Two levels over one engine:
- batch: `generate(prompts, sampling, seed)` → a Batch in the shared sequence layout (dagrl/engine/base.py);
- request: `submit` requests, `advance` the engine one scheduling step (finished requests come back as
  Completions), `abort` some or all (their partial outputs come back), `load_weights` while no request is in
  flight. Between two `advance` calls the engine is paused: that is where a driver aborts, syncs weights and
  re-submits the partial outputs as prefixes (`Completion.continuation`), whose KV is then recomputed under the
  new weights. Every generated token records the weight version that sampled it.
The asynchronous trainer and the multi-turn loop drive engines through the request level only.
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass, field
from typing import Iterator, Protocol

import torch

from dagrl.data.batch import Batch
from dagrl.engine.lora import LoraAdapter

# A bucket of full (unsharded) HF-named tensors, as consumed by every rollout's load_weights.
WeightBucket = list[tuple[str, torch.Tensor]]


@dataclass
class SamplingSpec:
    """How one rollout call samples; passed explicitly, never stored in the batch."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    do_sample: bool = True
    response_length: int = 64
    # per prompt row of this call, each <= response_length (the data's extra_info.max_response_length, for
    # long-tailed workloads); None: every row gets response_length
    response_lengths: tuple[int, ...] | None = None
    # generate every row to its limit, eos or not (fixed-length throughput runs; verl's rollout.ignore_eos)
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.response_lengths is not None and not all(0 < n <= self.response_length for n in self.response_lengths):
            raise ValueError(f"response_lengths must lie in 1..response_length={self.response_length}")

    def stop_ids(self, eos_token_ids) -> list[int]:
        """The tokens that end a response under this spec: none when eos is ignored."""
        return [] if self.ignore_eos else list(eos_token_ids)

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature == 0

    def limit(self, row: int) -> int:
        """The response limit of prompt row `row`."""
        return self.response_length if self.response_lengths is None else self.response_lengths[row]

    def with_limit(self, limit: int) -> SamplingSpec:
        """The spec of one request whose prompt row's limit is `limit` (a request carries a single limit)."""
        return dataclasses.replace(self, response_length=limit, response_lengths=None)


@dataclass(frozen=True)
class Request:
    """One sequence to generate. A request with a prefix continues a response sampled earlier (a partial rollout
    carried across a weight sync): the prefix counts against `sampling.response_length`."""

    id: str
    prompt_ids: tuple[int, ...]
    sampling: SamplingSpec  # `n` is not used: one request is one sequence
    seed: int  # the request's own sampling stream
    prefix_ids: tuple[int, ...] = ()
    prefix_log_probs: tuple[float, ...] = ()
    prefix_versions: tuple[int, ...] = ()

    @property
    def budget(self) -> int:
        """Tokens still to generate at most."""
        return self.sampling.response_length - len(self.prefix_ids)

    @property
    def stream_seed(self) -> int:
        """The seed of the tokens after the prefix: a continuation does not replay the stream its prefix used."""
        if not self.prefix_ids:
            return self.seed
        return zlib.crc32(f"{self.seed}/{len(self.prefix_ids)}".encode()) & 0x7FFFFFFF


@dataclass(frozen=True)
class Completion:
    """A request's response so far: whole when finished ("stop": an eos, "length": the budget), partial when
    aborted ("abort"). Lists run over the whole response, prefix included."""

    request: Request
    token_ids: tuple[int, ...]
    log_probs: tuple[float, ...]  # behaviour log-prob of each token, at the sampling temperature
    versions: tuple[int, ...]  # the weight version that sampled each token
    finish_reason: str

    @property
    def id(self) -> str:
        return self.request.id

    def continuation(self) -> Request:
        """The request that carries this partial response on (after a weight sync)."""
        return dataclasses.replace(
            self.request, prefix_ids=self.token_ids, prefix_log_probs=self.log_probs, prefix_versions=self.versions
        )


@dataclass
class Progress:
    """An engine's record of one request in flight: what it has generated after the request's prefix."""

    request: Request
    token_ids: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)

    def completion(self, finish_reason: str) -> Completion:
        request = self.request
        return Completion(
            request,
            request.prefix_ids + tuple(self.token_ids),
            request.prefix_log_probs + tuple(self.log_probs),
            request.prefix_versions + tuple(self.versions),
            finish_reason,
        )


def finish_reason(token: int, generated: int, request: Request, eos_token_ids: list[int]) -> str | None:
    """Why a request ends after its `generated`-th new token `token` ("stop", "length"), or None."""
    if token in request.sampling.stop_ids(eos_token_ids):
        return "stop"
    if generated >= request.budget:
        return "length"
    return None


class RolloutEngine(Protocol):
    """Generates responses with the actor's latest weights.

    One colocated rollout is: wake_weights → load_weights (when stale or `needs_weights`) → wake_cache →
    generate (or submit/advance) → sleep.
    """

    colocated: bool  # shares its device with the actor: the actor's memory is released around a rollout
    needs_weights: bool  # its weights were dropped (or never loaded): the next rollout must sync them
    version: int  # the weight version of the last load_weights: new tokens are tagged with it
    eos_token_ids: list[int]
    pad_token_id: int
    supports_adapter: bool  # takes load_adapter (adapter-only LoRA sync); merged LoRA goes through load_weights
    # serves a loaded adapter merged into its weights (W + s·B·A) rather than beside them: the actor then computes
    # with that merge, as with merged sync, so that both hold the same weights
    adapter_merged: bool

    # built with route recording asked (rollout.enable_rollout_routing_replay), the batch also holds each token's
    # MoE routes, `routed_experts` (layout: dagrl/engine/rollout/routes.py); the hf and vLLM rollouts record them
    def generate(self, prompts: Batch, sampling: SamplingSpec, seed: int) -> Batch: ...

    def submit(self, requests: list[Request]) -> None: ...

    def advance(self) -> list[Completion]: ...  # one scheduling step; the requests that finished in it

    def abort(self, ids: list[str] | None = None) -> list[Completion]: ...  # these (None: all); partial outputs

    def in_flight(self) -> int: ...

    # refused while requests are in flight (abort them first: their KV belongs to the old weights)
    def load_weights(self, buckets: Iterator[WeightBucket], version: int = 0) -> dict[str, float]: ...

    # adapter-only sync: samples from then on from W + scaling·B·A over the base weights it holds (the last
    # load_weights, or the model it was built from); replaces the previous adapter; refused while requests are in
    # flight, like load_weights; same metrics as load_weights
    def load_adapter(self, adapter: LoraAdapter, version: int = 0) -> dict[str, float]: ...

    def wake_weights(self) -> None: ...

    def wake_cache(self) -> None: ...

    def sleep(self) -> None: ...


class StaleWeights(RuntimeError):
    """A weight sync that left some of the rollout engine's tensors as they were: the actor's export, or the
    layers the engine builds (an FP8 engine quantizing a layer the sync sends in bf16), do not cover the model."""

    def __init__(self, engine: str, names: set[str]):
        self.names = sorted(names)
        super().__init__(
            f"weight sync left {len(self.names)} {engine} tensors stale, e.g. {self.names[:3]}: the actor's export "
            f"does not cover this model"
        )


def refuse_in_flight(in_flight: int, what: str) -> None:
    """Weights change only between requests: the KV cache of a request in flight belongs to the old weights."""
    if in_flight:
        raise RuntimeError(
            f"{what} with {in_flight} requests in flight: abort them first (their KV cache belongs to the old "
            f"weights) and re-submit their continuations"
        )


def run_to_completion(engine: RolloutEngine, requests: list[Request]) -> list[Completion]:
    """Submit `requests` and advance until every one has finished; completions in request order."""
    engine.submit(requests)
    done: dict[str, Completion] = {}
    while engine.in_flight():
        done.update((completion.id, completion) for completion in engine.advance())
    return [done[request.id] for request in requests]
