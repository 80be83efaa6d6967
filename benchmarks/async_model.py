"""A discrete-event model of asynchronous RL training: what step time and speedup two pools would give at scale.

usage: python3 benchmarks/async_model.py --table [--rates-json PATH] [--partial] [--oversample 2.0] [--steps 16]

We can measure generation and training rates on a few GPUs, not step time on 8..1,024 of them. This model takes
per-GPU rates, plays dagrl's schedules forward, and is printed beside each measurement (async_pipeline.py --report
fits it to the colocated run: benchmarks/async_fit.py) so it is checked where it can be. `--table` predicts the
speedup of two pools over colocated at equal GPU count for 8..1,024 GPUs and K = 0..4.

Decode: a GPU's iteration advances each of its b sequences in flight by one token and costs 1/seq_tok_s +
b/decode_tok_s seconds (memory-bound: the fixed part reads the weights, each sequence adds its KV and sampling). So
a GPU's tokens/s grow with occupancy towards decode_tok_s, a lone long sequence runs at ~seq_tok_s (the tail costs
time), and filling the tail with more sequences (partial rollout) is nearly free. Sequences (re)submitted to a GPU
are prefilled first (prompt + kept prefix, at prefill_tok_s), which delays that GPU's decode.

Schedules, as dagrl runs them: each batch of B prompts x n is split over the rollout ranks in contiguous shares of whole
groups, and each rank keeps its own buffer of groups, as dagrl's `PartialRolloutBuffer` (where B does not split over the
ranks, --table's large counts, gcd(B, ranks) buffers over equal sets of GPUs). `colocated`: every GPU generates its
share, then all train (plus `switch_s` a step: the engine's sleep and wake-up). With partial rollout a buffer holds
ceil(oversample x share) groups (step 1 draws further batches to fill it); its rank stops once `share` are finished and
trains on those; the rest are carried and prefilled again. `two_pools`: batch b is generated once version >= b-1-K is
loaded (the newest available is loaded first, a push stalling the rollout push_s); training step b starts when batch b
is there and step b-1 done, and its end makes version b available. With partial rollout the rollout pool generates until
every rank has its share, and a push arriving mid-batch interrupts it: load, prefill what is in flight, go on. With
`staleness` K (colocated) or `restarts` (two pools), a group holding a token more than K versions older than the weights
its batch's update starts from restarts from its prompt when the batch begins (generation spent twice); without, it
finishes under newer weights. Training takes tokens (prompt + response) / (rate x GPUs). Step 1 may carry one-time
costs: `first_train_s`, and `first_switch_s` (colocated: the engine's first wake-up).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from dataclasses import dataclass, field
from functools import partial as bind
from typing import Callable

import numpy as np

GPU_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024)
SPLITS = (1 / 8, 1 / 4, 3 / 8, 1 / 2, 5 / 8, 3 / 4, 7 / 8)  # rollout fractions searched for the best split
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


@dataclass
class Result:
    step_s: float  # mean step time over the counted steps
    tokens_per_gpu_s: float  # trained (prompt + response) tokens per second per GPU, all GPUs counted
    rollout_idle: float  # share of the rollout GPUs' time with nothing in flight
    train_idle: float  # share of the training GPUs' time without a step (colocated: the same GPUs as rollout)
    resp_mean: float = 0.0  # mean trained response length: partial rollout trains the short ones first

    def __post_init__(self):
        for f in dataclasses.fields(self):
            setattr(self, f.name, float(getattr(self, f.name)))


def load_rates(path: str) -> Rates:
    """Rates from a JSON object whose keys are Rates fields; missing keys keep their defaults."""
    data = json.loads(open(path).read())
    names = [f.name for f in dataclasses.fields(Rates)]
    for key in data:
        if key not in names:
            raise ValueError(f"{path}: unknown rate key {key!r} (expected one of {', '.join(names)})")
    return Rates(**{key: float(value) for key, value in data.items()})


class _Engine:
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


class _Buffers:
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
        self.engine = _Engine(ranks, slots, rates, w.prompt_len)
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


def _result(
    seconds: list[float],
    tokens: list[tuple],
    idle: float,
    gpus: int,
    rollout_gpus: int,
    train_idle: float | None = None,
) -> Result:
    total = sum(seconds)
    rollout_idle = idle / (rollout_gpus * total)
    return Result(
        total / len(seconds),
        sum(t for t, _, _ in tokens) / total / gpus,
        rollout_idle,
        rollout_idle if train_idle is None else train_idle,
        sum(r for _, r, _ in tokens) / max(1, sum(k for *_, k in tokens)),
    )


def colocated(
    w: Workload,
    rates: Rates,
    gpus: int,
    steps: int = 16,
    partial: bool = False,
    oversample: float = 1.0,
    staleness: int | None = None,
    warm: int | None = None,
) -> Result:
    """Every GPU generates its share, then every GPU trains. Partial: each rank keeps ceil(oversample x share)
    groups, stops at `share` finished and carries the rest; with `staleness` K, a carried group holding a token
    more than K versions older than step i's weights (version i-1) restarts. `warm`: steps left uncounted (default
    a quarter)."""
    buffers = _Buffers(w, rates, gpus, steps, oversample if partial else 1.0)
    seconds, tokens, idle = [], [], []
    for i in range(1, steps + 1):
        buffers.fill()
        buffers.version = i - 1
        if partial and staleness is not None:
            buffers.restart(i - 1 - staleness)
        stop = buffers.ready(buffers.engine.plan())  # each rank stops at its own share
        busy = buffers.advance(stop)
        buffers.engine.fresh |= buffers.engine.active()  # the engine sleeps: what is carried is prefilled again
        gen = float(stop.max())
        idle.append(float((gen - busy).sum()))
        tokens.append(buffers.take())
        first = rates.first_switch_s + rates.first_train_s if i == 1 else 0.0
        seconds.append(gen + tokens[-1][0] / (gpus * rates.train_tok_s) + rates.push_s + rates.switch_s + first)
    warm = max(1, steps // 4) if warm is None else warm
    return _result(seconds[warm:], tokens[warm:], sum(idle[warm:]), gpus, gpus)


def two_pools(
    w: Workload,
    rates: Rates,
    rollout_gpus: int,
    train_gpus: int,
    K: int,
    steps: int = 16,
    partial: bool = False,
    oversample: float = 1.0,
    restarts: bool = False,
    warm: int | None = None,
) -> Result:
    """Rollout pool and training pool meet at a buffer; batch b is generated once version >= b-1-K is loaded;
    training step b starts when batch b is complete and step b-1 is done. `restarts` (partial): when batch b
    begins, a group holding a token older than version b-1-K starts again from its prompt."""
    buffers, R = _Buffers(w, rates, rollout_gpus, steps, oversample if partial else 1.0), rollout_gpus
    t, ends, spans, idle = 0.0, [0.0], [], []  # ends[s]: when version s is available (0: at the start)
    newest = lambda now: max(s for s, end in enumerate(ends) if end <= now)  # noqa: E731 - a short local helper
    for b in range(1, steps + 1):
        need = max(0, b - 1 - K)
        if ends[need] > t:  # the staleness bound: wait for the weights
            idle.append((np.full(R, t), ends[need]))
            t = ends[need]
        if newest(t) > buffers.version:  # new weights: the prefix cache is reset, what is carried is prefilled again
            t, buffers.version = t + rates.push_s, newest(t)
            buffers.engine.fresh |= buffers.engine.active()
        buffers.fill()
        if partial and restarts:
            buffers.restart(b - 1 - K)
        while True:
            ready = float(buffers.ready(buffers.engine.plan()).max())  # every rank has its share
            push = ends[buffers.version + 1] - t if partial and buffers.version + 1 < len(ends) else np.inf
            seg = min(ready, max(push, 0.0))
            busy = buffers.advance(seg)
            idle.append((t + busy, t + seg))
            t += seg
            if seg == ready:
                break
            t, buffers.version = t + rates.push_s, newest(t)  # a push mid-batch: load it, prefill again, go on
            buffers.engine.fresh |= buffers.engine.active()
        tokens = buffers.take()
        start = max(t, ends[-1])
        ends.append(start + tokens[0] / (train_gpus * rates.train_tok_s) + (rates.first_train_s if b == 1 else 0.0))
        spans.append((start, ends[-1], tokens))
    warm = max(1, steps // 4) if warm is None else warm
    lo, hi = ends[warm], ends[steps]
    rollout_idle = sum(np.clip(np.minimum(end, hi) - np.maximum(starts, lo), 0, None).sum() for starts, end in idle)
    trained = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e, _ in spans)
    return _result(
        [(hi - lo) / (steps - warm)] * (steps - warm),
        [tok for *_, tok in spans[warm:]],
        rollout_idle,
        R + train_gpus,
        R,
        1.0 - trained / (hi - lo),
    )


def split(gpus: int, fraction: float) -> tuple[int, int]:
    rollout = min(gpus - 1, max(1, round(fraction * gpus)))
    return rollout, gpus - rollout


def predict_table(
    w: Workload,
    rates: Rates,
    gpu_counts=GPU_COUNTS,
    ks=range(5),
    steps: int = 16,
    partial: bool = False,
    oversample: float = 1.0,
) -> list[dict]:
    """Per GPU count and K: colocated step time and two pools' speedup (trained tokens/s ratio) at rollout
    fractions 1/2, 3/4 and the best of SPLITS."""
    rows = []
    for gpus in gpu_counts:
        base = colocated(w, rates, gpus, steps, partial, oversample)
        for k in ks:
            runs = {f: two_pools(w, rates, *split(gpus, f), k, steps, partial, oversample) for f in SPLITS}
            best = max(runs, key=lambda f: runs[f].tokens_per_gpu_s)
            speed = {f: r.tokens_per_gpu_s / base.tokens_per_gpu_s for f, r in runs.items()}
            rows.append(
                dict(
                    gpus=gpus,
                    K=k,
                    coloc_step_s=base.step_s,
                    half=speed[1 / 2],
                    three_q=speed[3 / 4],
                    best_split=split(gpus, best),
                    best=speed[best],
                    best_step_s=runs[best].step_s,
                    best_idle=(runs[best].rollout_idle, runs[best].train_idle),
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="print the predicted speedup table")
    parser.add_argument("--rates-json", help="measured rates: a JSON object with Rates fields as keys")
    parser.add_argument("--partial", action="store_true", help="partial rollout on both sides")
    parser.add_argument("--oversample", type=float, default=2.0, help="partial rollout's oversample ratio")
    for flag, default in (
        ("--steps", 16),
        ("--batch", 128),
        ("--n", 8),
        ("--prompt-len", 256),
        ("--mean-len", 1024),
        ("--max-len", 8192),
        ("--seed", 0),
    ):
        parser.add_argument(flag, type=int, default=default)
    args = parser.parse_args()
    if not args.table:
        parser.error("nothing to do: pass --table")
    try:
        rates = load_rates(args.rates_json) if args.rates_json else Rates()
    except ValueError as error:
        raise SystemExit(str(error)) from None
    w = Workload(
        args.batch,
        args.n,
        args.prompt_len,
        bind(long_tail_lengths, mean=args.mean_len, max_len=args.max_len),
        args.seed,
    )
    oversample = args.oversample if args.partial else 1.0
    print(f"rates: {dataclasses.asdict(rates)}")
    mode = f"partial rollout, oversample {oversample}" if args.partial else "no partial rollout"
    print(
        f"workload: B={w.batch} prompts x n={w.n}, prompt {w.prompt_len} tokens, responses lognormal(sigma=1) "
        f"mean {args.mean_len:g} clipped to [16, {args.max_len}]; {mode}; {args.steps} steps "
        f"(first {max(1, args.steps // 4)} warm-up), seed {args.seed}"
    )
    print("speedup = two pools' trained tokens/s over colocated's, same GPU count; split = rollout/train GPUs")
    print("| GPUs | K | coloc step s | 1/2 | 3/4 | best split | best | best step s | idle roll/train |")
    print("|---" * 9 + "|")
    for row in predict_table(w, rates, steps=args.steps, partial=args.partial, oversample=oversample):
        rollout, train = row["best_split"]
        print(
            f"| {row['gpus']} | {row['K']} | {row['coloc_step_s']:.1f} | {row['half']:.2f}x | "
            f"{row['three_q']:.2f}x | {rollout}/{train} | {row['best']:.2f}x | {row['best_step_s']:.1f} | "
            f"{row['best_idle'][0]:.2f}/{row['best_idle'][1]:.2f} |"
        )


if __name__ == "__main__":
    main()
