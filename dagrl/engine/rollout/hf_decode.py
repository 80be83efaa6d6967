"""The `hf` rollout's request level: an interruptible decode loop over a transformers model.

`advance()` decodes one token for every request in flight. The KV cache covers the rows in flight. Requests that
join while others decode (a multi-turn trajectory's next turn, a new prompt) are prefilled alone at the next
`advance()` and their cache merged into the batch's, left-padded: the rows already in flight are not computed again
(weights change only with nothing in flight, so their cache is always current). With nothing cached, the first
`advance()` prefills every row's prompt + response so far, which is the recomputation a partial rollout needs after
a weight sync. Finished rows leave the cache at once. Each request samples from its own generator, seeded by the
request, so what it samples does not depend on which other requests share its batch.
"""

from __future__ import annotations

import functools
import inspect

import torch

from dagrl.engine.rollout.interface import Completion, Progress, Request, SamplingSpec, finish_reason


def cache_kwarg(model) -> str:
    """The name this transformers version gives the KV-cache argument: `cache` from 5.2x on (`past_key_values`
    still works there but warns until 6.0), `past_key_values` before."""
    return _cache_kwarg(type(model))


@functools.cache
def _cache_kwarg(model_class: type) -> str:  # once per class: it is asked at every decode step
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def filter_logits(logits: torch.Tensor, sampling: SamplingSpec) -> torch.Tensor:
    """Temperature-scaled logits [B, V] with top-k / top-p cut (the cut entries at -inf)."""
    logits = logits / sampling.temperature
    if 0 < sampling.top_k < logits.shape[-1]:
        kth = torch.topk(logits, sampling.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        ordered, order = torch.sort(logits, dim=-1, descending=True)
        probs = ordered.softmax(-1)
        outside = probs.cumsum(-1) - probs > sampling.top_p  # keeps the first token that crosses top_p
        logits = logits.masked_fill(outside.scatter(-1, order, outside), float("-inf"))
    return logits


class DecodeLoop:
    """Requests in flight on one model; see the module docstring."""

    def __init__(
        self, model: torch.nn.Module, eos_token_ids: list[int], pad_token_id: int, device: torch.device
    ) -> None:
        self.model, self.device = model, device
        self.eos_token_ids, self.pad_token_id = list(eos_token_ids), pad_token_id
        self.rows: list[Progress] = []  # in flight, in cache order
        self.generators: list[torch.Generator] = []
        self.cache = None  # None: the next advance prefills every row
        self.cached = 0  # rows[:cached] are in the cache; the rest joined since and wait
        self.attention_mask: torch.Tensor | None = None
        self.next_ids: torch.Tensor | None = None  # [B, 1] the last sampled token of each row, not yet in the cache

    def submit(self, requests: list[Request]) -> None:
        known = {row.request.id for row in self.rows}
        for request in requests:
            if request.id in known:
                raise ValueError(f"request {request.id!r} is already in flight")
            if request.budget <= 0:
                raise ValueError(f"request {request.id!r} has no tokens left to generate (budget {request.budget})")
            known.add(request.id)
            generator = torch.Generator(device="cpu")
            generator.manual_seed(request.stream_seed)
            self.rows.append(Progress(request))
            self.generators.append(generator)

    def in_flight(self) -> int:
        return len(self.rows)

    @torch.no_grad()
    def advance(self, version: int) -> list[Completion]:
        if not self.rows:
            return []
        if self.cache is None:
            self.cache, self.attention_mask, logits = self._prefill(self.rows)
        elif self.cached < len(self.rows):
            logits = self._join()
        else:
            logits = self._decode()
        self.cached = len(self.rows)
        tokens, log_probs = self._sample(logits)
        finished, keep = [], []
        for index, (row, token, log_prob) in enumerate(zip(self.rows, tokens, log_probs)):
            row.token_ids.append(token)
            row.log_probs.append(log_prob)
            row.versions.append(version)
            reason = finish_reason(token, len(row.token_ids), row.request, self.eos_token_ids)
            if reason:
                finished.append(row.completion(reason))
            else:
                keep.append(index)
        self.next_ids = torch.tensor(tokens, device=self.device).unsqueeze(1)
        if len(keep) < len(self.rows):
            self._select(keep)
        return finished

    def abort(self, ids: list[str] | None = None) -> list[Completion]:
        wanted = None if ids is None else set(ids)
        aborted = [row.completion("abort") for row in self.rows if wanted is None or row.request.id in wanted]
        self._select([i for i, row in enumerate(self.rows) if wanted is not None and row.request.id not in wanted])
        return aborted

    # ---- internals ---------------------------------------------------------------------------------
    def _select(self, keep: list[int]) -> None:
        cached = [i for i in keep if i < self.cached]  # the others joined and are not in the cache yet
        self.rows = [self.rows[i] for i in keep]
        self.generators = [self.generators[i] for i in keep]
        self.cached = len(cached)
        if not cached:
            self.cache = self.attention_mask = self.next_ids = None
            return
        if self.cache is not None:
            index = torch.tensor(cached, device=self.device)
            self.cache.batch_select_indices(index)
            self.attention_mask = self.attention_mask[index]
            self.next_ids = self.next_ids[index]

    def _prefill(self, rows: list[Progress]):
        """`rows`' prompt + response so far, left-padded, through the model: (a fresh cache, its attention mask,
        the last position's logits)."""
        from transformers import DynamicCache

        sequences = [list(r.request.prompt_ids) + list(r.request.prefix_ids) + r.token_ids for r in rows]
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, sequence in enumerate(sequences):
            ids[row, width - len(sequence) :] = torch.tensor(sequence)
            mask[row, width - len(sequence) :] = 1
        mask, cache = mask.to(self.device), DynamicCache()
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(
            input_ids=ids.to(self.device),
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{cache_kwarg(self.model): cache},
        )
        return cache, mask, out.logits[:, -1, :].float()

    def _join(self) -> torch.Tensor:
        """The cached rows decode one token; the rows that joined are prefilled alone and their cache appended."""
        if not _plain_layers(self.cache):  # a cache kind whose tensors we do not know: prefill every row again
            self.cache, self.attention_mask, logits = self._prefill(self.rows)
            return logits
        cache, mask, joined_logits = self._prefill(self.rows[self.cached :])
        logits = self._decode()
        width = max(self.attention_mask.shape[1], mask.shape[1])
        for layer, new in zip(self.cache.layers, cache.layers):
            layer.keys = torch.cat([_left_pad(layer.keys, width, -2), _left_pad(new.keys, width, -2)])
            layer.values = torch.cat([_left_pad(layer.values, width, -2), _left_pad(new.values, width, -2)])
        self.attention_mask = torch.cat([_left_pad(self.attention_mask, width, 1), _left_pad(mask, width, 1)])
        return torch.cat([logits, joined_logits])

    def _decode(self) -> torch.Tensor:
        """The last sampled tokens through the cache."""
        ones = torch.ones((self.attention_mask.shape[0], 1), dtype=self.attention_mask.dtype, device=self.device)
        self.attention_mask = torch.cat([self.attention_mask, ones], dim=1)
        positions = self.attention_mask.sum(-1, keepdim=True) - 1
        out = self.model(
            input_ids=self.next_ids,
            attention_mask=self.attention_mask,
            position_ids=positions,
            use_cache=True,
            **{cache_kwarg(self.model): self.cache},
        )
        return out.logits[:, -1, :].float()

    def _sample(self, logits: torch.Tensor) -> tuple[list[int], list[float]]:
        """One token per row from its own sampling settings and generator, and its log-prob at the sampling
        temperature (greedy: at temperature 1)."""
        tokens, log_probs = [], []
        logits = logits.cpu()
        for row, generator, values in zip(self.rows, self.generators, logits):
            sampling = row.request.sampling
            if sampling.greedy:
                token = int(values.argmax())
                log_prob = values.log_softmax(-1)[token]
            else:
                filtered = filter_logits(values.unsqueeze(0), sampling)[0]
                token = int(torch.multinomial(filtered.softmax(-1), 1, generator=generator))
                log_prob = (values / sampling.temperature).log_softmax(-1)[token]
            tokens.append(token)
            log_probs.append(float(log_prob))
        return tokens, log_probs


def _plain_layers(cache) -> bool:
    """Every layer of `cache` keeps whole keys and values [B, heads, length, dim] (transformers' DynamicLayer)."""
    from transformers.cache_utils import DynamicLayer

    return all(type(layer) is DynamicLayer for layer in cache.layers)


def _left_pad(tensor: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """`tensor` with zeros prepended along `dim` to `width` (masked positions: their values are never attended)."""
    missing = width - tensor.shape[dim]
    if missing == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)
