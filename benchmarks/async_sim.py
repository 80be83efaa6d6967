"""The async model's simulation core (the model and its schedules: benchmarks/async_model.py): the workload, the
per-GPU rates, the response-length sampler, the decode engine's in-flight sequences and the per-rank group buffers."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

NONE = np.iinfo(np.int64).max  # a group's first-token version before it has one


def _clipped_mean(mu: float, sigma: float, lo: float, hi: float) -> float:
    """E[clip(X, lo, hi)] for X ~ lognormal(mu, sigma), in closed form."""
    cdf = lambda x: 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))  # noqa: E731 - a short local helper
    a, b = math.log(lo), math.log(hi)
    body = math.exp(mu + sigma**2 / 2) * (cdf((b - mu - sigma**2) / sigma) - cdf((a - mu - sigma**2) / sigma))
    return body + lo * cdf((a - mu) / sigma) + hi * (1.0 - cdf((b - mu) / sigma))


def long_tail_lengths(
    rng: np.random.Generator, count: int, mean: float = 1024, max_len: int = 8192, sigma: float = 1.0, min_len: int = 16
) -> np.ndarray:
    """`count` response lengths: lognormal(mu, sigma) rounded and clipped to [min_len, max_len], mu solved (by
    bisection on the closed-form clipped mean) so the mean after clipping is `mean`. sigma=1 puts ~0.5 % of
    responses at max_len=8192 for mean 1024: a batch of 1,024 has a handful of sequences 8x the mean."""
    assert min_len < mean < max_len, (min_len, mean, max_len)
    lo, hi = math.log(min_len) - 10 * sigma, math.log(max_len) + 10 * sigma
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _clipped_mean(mid, sigma, min_len, max_len) < mean else (lo, mid)
    return np.clip(np.rint(rng.lognormal((lo + hi) / 2, sigma, count)), min_len, max_len)


@dataclass
class Workload:
    batch: int = 128  # prompts per step (train_batch_size)
    n: int = 8  # responses per prompt
    prompt_len: int = 256
    lengths: Callable[[np.random.Generator, int], np.ndarray] = field(default=long_tail_lengths)
    seed: int = 0
    # a real run's response lengths, n per prompt, in the order its sampler draws the prompts: replayed instead of
    # drawing from `lengths` (four steps of 48 prompts are too few for a fresh draw to have the run's tail)
    replay: np.ndarray | None = None


@dataclass
class Rates:
    decode_tok_s: float = 20_000.0  # per GPU: what a full batch approaches (1 / a sequence's share of an iteration)
    seq_tok_s: float = 60.0  # a lone sequence's decode speed: 1 / an iteration's fixed seconds
    prefill_tok_s: float = 200_000.0  # per GPU
    train_tok_s: float = 8_000.0  # per GPU: update forward+backward plus log-prob passes, as one rate
    push_s: float = 0.5  # seconds per weight push
    switch_s: float = 0.0  # colocated only: seconds a step spends offloading, waking and putting the engine to sleep
    first_switch_s: float = 0.0  # colocated only: step 1's extra seconds (the engine's first wake-up)
    first_train_s: float = 0.0  # step 1's extra training seconds (warm-up), either schedule

    def iteration_s(self, active):
        """Seconds of one decode iteration of a GPU with `active` sequences in flight."""
        return 1.0 / self.seq_tok_s + active / self.decode_tok_s


def load_rates(path: str) -> Rates:
    """Rates from a JSON object whose keys are Rates fields; missing keys keep their defaults."""
    data = json.loads(open(path).read())
    names = [f.name for f in dataclasses.fields(Rates)]
    for key in data:
        if key not in names:
            raise ValueError(f"{path}: unknown rate key {key!r} (expected one of {', '.join(names)})")
    return Rates(**{key: float(value) for key, value in data.items()})


class Engine:
    """In-flight sequences in `slots` per GPU. Within a segment (nothing joins) the finish times are closed form:
    every sequence on a GPU advances one token per iteration, so they finish in order of remaining length, and
    while m of them run a token costs iteration_s(m)."""

    def __init__(self, gpus: int, slots: int, rates: Rates, prompt_len: int):
        self.rates, self.prompt_len, shape = rates, prompt_len, (gpus, max(1, slots))
        self.rem, self.prefix = np.zeros(shape), np.zeros(shape)
        self.gid, self.fresh = np.full(shape, -1), np.zeros(shape, bool)

    def active(self) -> np.ndarray:
        return self.gid >= 0

    def place(self, gids: np.ndarray, lengths: np.ndarray, cohorts: np.ndarray, width: int) -> None:
        """Fill free slots of each sequence's cohort (GPUs [c * width, (c + 1) * width)), least-loaded GPU first."""
        free = ~self.active()
        key = np.where(free, (~free).sum(1, keepdims=True) + np.cumsum(free, 1), np.iinfo(np.int64).max)
        slots = free.shape[1]
        best = np.argsort(key.reshape(-1, width * slots), axis=1, kind="stable")  # each cohort's slots, best first
        order = np.argsort(cohorts, kind="stable")
        cohorts, gids, lengths = cohorts[order], gids[order], lengths[order]
        flat = best[
            cohorts, np.arange(len(cohorts)) - np.searchsorted(cohorts, cohorts)
        ]  # the k-th of its cohort: k-th best
        rows, cols = cohorts * width + flat // slots, flat % slots
        assert free[rows, cols].all(), "cohort overfilled"
        self.gid[rows, cols], self.rem[rows, cols], self.prefix[rows, cols] = gids, lengths, 0.0
        self.fresh[rows, cols] = True

    def plan(self) -> np.ndarray:
        """Finish time of every slot from now (inf where empty), each GPU's prefill first."""
        act, r = self.active(), self.rates
        self.offset = np.where(self.fresh & act, self.prompt_len + self.prefix, 0).sum(1) / r.prefill_tok_s
        rem = np.where(act, self.rem, 0.0)
        order = np.argsort(rem, axis=1, kind="stable")
        self.sorted = np.take_along_axis(rem, order, 1)  # empty slots first, with nothing left
        self.tick = r.iteration_s(rem.shape[1] - np.arange(rem.shape[1]))  # a token's seconds while these run
        self.cum = np.cumsum(np.diff(self.sorted, axis=1, prepend=0.0) * self.tick, axis=1)
        done = np.empty_like(rem)
        np.put_along_axis(done, order, self.cum + self.offset[:, None], 1)
        self.done = np.where(act, done, np.inf)
        return self.done

    def advance(self, until) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Run the planned segment for `until` seconds (one per GPU, or one for all): the finished sequences'
        group ids, the group ids that made tokens, and each GPU's busy seconds."""
        act = self.active()
        until = np.broadcast_to(np.asarray(until, float), self.offset.shape)
        tau = np.clip(until - self.offset, 0.0, None)
        phase = (self.cum <= tau[:, None]).sum(1)  # sequences (in length order, empty slots first) finished per GPU

        def at(a):
            return np.where(phase > 0, np.take_along_axis(a, np.maximum(phase - 1, 0)[:, None], 1)[:, 0], 0.0)

        level = at(self.sorted) + (tau - at(self.cum)) / self.tick[np.minimum(phase, len(self.tick) - 1)]
        finished = act & (self.done <= until[:, None])
        made = np.where(finished, self.rem, np.where(act, np.minimum(self.rem, level[:, None]), 0.0))
        busy = np.where(act.any(1), np.minimum(until, np.where(act, self.done, 0).max(1)), 0.0)
        gids, moved = self.gid[finished], self.gid[act & (made > 0)]
        self.rem, self.prefix = self.rem - made, self.prefix + made
        self.fresh &= ~(until >= self.offset)[:, None]
        self.gid[finished] = -1
        return gids, moved, busy


class Buffers:
    """The groups a run draws and where each stands: the rollout ranks' buffers and their engine (see the module
    docstring)."""

    def __init__(self, w: Workload, rates: Rates, ranks: int, steps: int, oversample: float):
        self.w, self.n, self.rng = w, w.n, np.random.default_rng(w.seed)
        # dagrl: a buffer a rank, each its contiguous share of every batch. Where the batch does not split over
        # the ranks (--table's large counts), gcd(B, ranks) buffers over equal sets of GPUs: the nearest that does
        self.cohorts = math.gcd(w.batch, ranks)
        self.width = ranks // self.cohorts  # GPUs a buffer
        self.share = w.batch // self.cohorts  # groups a buffer trains a step
        self.target = math.ceil(oversample * self.share)  # groups a buffer keeps
        self.rank_cohort = np.arange(ranks) // self.width
        slots = math.ceil(self.target * w.n / self.width)
        self.engine = Engine(ranks, slots, rates, w.prompt_len)
        bound = (steps + math.ceil(oversample) + 1) * w.batch
        self.lengths = np.zeros((bound, w.n))
        self.cohort, self.left = np.zeros(bound, int), np.zeros(bound, int)
        self.born = np.full(bound, NONE)  # the version of each group's first token
        self.state = np.zeros(bound, int)  # 0 not drawn, 1 in a buffer, 2 trained
        self.drawn, self.version = 0, 0

    def fill(self) -> None:
        """Draw this step's batch, and further batches while the buffers hold fewer than their target."""
        while True:
            B, n, first = self.w.batch, self.n, self.drawn
            if self.w.replay is not None:
                lengths = self.w.replay[first * n : (first + B) * n]
                assert len(lengths) == B * n, "the replayed lengths run out"
            else:
                lengths = self.w.lengths(self.rng, B * n)
            gids = np.arange(first, first + B)
            self.lengths[gids] = np.reshape(lengths, (B, n))
            self.cohort[gids] = np.arange(B) // self.share
            self.left[gids], self.state[gids], self.drawn = n, 1, first + B
            self._place(gids)
            if (self.state == 1).sum() >= self.target * self.cohorts:
                return

    def _place(self, gids: np.ndarray) -> None:
        self.engine.place(
            np.repeat(gids, self.n), self.lengths[gids].ravel(), np.repeat(self.cohort[gids], self.n), self.width
        )

    def restart(self, oldest: int) -> int:
        """Groups in the buffers with a token older than version `oldest` start again from their prompts."""
        stale = np.flatnonzero((self.state == 1) & (self.born < oldest))
        self.engine.gid[np.isin(self.engine.gid, stale)] = -1
        self.left[stale], self.born[stale] = self.n, NONE
        self._place(stale)
        return len(stale)

    def ready(self, done: np.ndarray) -> np.ndarray:
        """When each rank's cohort has `share` finished groups, from now (inf: it cannot in this segment)."""
        act = self.engine.active()
        finish = np.full(len(self.state), -np.inf)
        np.maximum.at(finish, self.engine.gid[act], done[act])
        held, C = self.state == 1, self.cohorts
        need = self.share - np.bincount(self.cohort[held & (self.left == 0)], minlength=C)
        waiting = np.flatnonzero(held & (self.left > 0))
        order = np.lexsort((finish[waiting], self.cohort[waiting]))
        cohort, times = self.cohort[waiting][order], finish[waiting][order]
        start, count = np.searchsorted(cohort, np.arange(C)), np.bincount(cohort, minlength=C)
        at = np.where(need <= 0, 0.0, np.inf)
        ok = (need > 0) & (need <= count)
        at[ok] = times[start[ok] + need[ok] - 1]
        return at[self.rank_cohort]

    def advance(self, until) -> np.ndarray:
        fin, moved, busy = self.engine.advance(until)
        np.subtract.at(self.left, fin, 1)
        self.born[moved] = np.minimum(self.born[moved], self.version)
        return busy

    def take(self) -> tuple[float, float, int]:
        """Each cohort's first `share` finished groups, in buffer order: (prompt + response tokens, response tokens,
        responses) of the batch."""
        fin = np.flatnonzero((self.state == 1) & (self.left == 0))
        cohort = self.cohort[fin]
        order = np.argsort(cohort, kind="stable")
        nth = np.empty(len(fin), int)
        nth[order] = np.arange(len(fin)) - np.searchsorted(cohort[order], cohort[order])
        batch = fin[nth < self.share]
        assert len(batch) == self.share * self.cohorts, "a batch short of finished groups"
        self.state[batch] = 2
        resp = self.lengths[batch].sum()
        return resp + self.w.prompt_len * self.n * len(batch), resp, self.n * len(batch)
