"""A discrete-event model of asynchronous RL training: what step time and speedup two pools would give at scale.

usage: python3 benchmarks/async_model.py --table [--rates-json PATH] [--partial] [--oversample 2.0] [--steps 16]

We can measure generation and training rates on a few GPUs, not step time on 8..1,024 of them. This model takes
the measured per-GPU rates (decode tokens/s at full batch, one sequence's decode speed limit, prefill, training
tokens/s, seconds per weight push) and plays the schedules forward, so a prediction is printed beside each
measurement and checked where it can be. Schedules: `colocated` (every GPU generates, then every GPU trains; with
`partial` it oversamples and carries unfinished sequences over) and `two_pools` (a rollout pool and a training
pool meeting at a buffer, batch b admitted once weights version >= b-1-K are loaded). `--table` prints the
predicted speedup of two pools over colocated at equal GPU count for 8..1,024 GPUs and K = 0..4.

Assumptions: a GPU shares its decode rate evenly over its in-flight sequences, none faster than the per-sequence
limit (so a lone long sequence runs at that limit: the long tail costs time); sequences are dealt evenly over GPUs
and stay where placed; prefill of a GPU's new sequences (prompt, plus the kept prefix after a weight change)
delays that GPU's decode; training time is tokens (prompt + response) / (train rate x GPUs), perfectly parallel; a
push stalls the rollout GPUs for `push_s` (colocated: once per step); the trainer never waits for a push. Version v
is usable by the rollout pool at train_end(v) + push_s. Non-partial rollout loads new weights only between
batches; partial rollout interrupts at every push, re-prefills what is in flight and goes on, admitting whole
groups as slots free up (in steps of 10 % of its slots); the staleness bound applies at admission. With partial
rollout and `staleness` given, a group whose first token is more than K versions older than the weights the update
of its batch starts from restarts from its prompt when that batch begins, as dagrl does (its tokens so far are
generation spent twice).
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


def _clipped_mean(mu: float, sigma: float, lo: float, hi: float) -> float:
    """E[clip(X, lo, hi)] for X ~ lognormal(mu, sigma), in closed form."""
    cdf = lambda x: 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))  # noqa: E731
    a, b = math.log(lo), math.log(hi)
    body = math.exp(mu + sigma**2 / 2) * (cdf((b - mu - sigma**2) / sigma) - cdf((a - mu - sigma**2) / sigma))
    return body + lo * cdf((a - mu) / sigma) + hi * (1.0 - cdf((b - mu) / sigma))


def long_tail_lengths(rng: np.random.Generator, count: int, mean: float = 1024, max_len: int = 8192,
                      sigma: float = 1.0, min_len: int = 16) -> np.ndarray:
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


@dataclass
class Rates:
    decode_tok_s: float = 20_000.0  # decode tokens/s per GPU at full batch, all sequences together
    seq_tok_s: float = 60.0  # decode tokens/s of one sequence: its speed limit
    prefill_tok_s: float = 200_000.0  # per GPU
    train_tok_s: float = 8_000.0  # per GPU: update forward+backward plus log-prob passes, as one rate
    push_s: float = 0.5  # seconds per weight push
    switch_s: float = 0.0  # colocated only: seconds a step spends offloading, waking and putting the engine to sleep


@dataclass
class Result:
    step_s: float  # mean step time after warm-up
    tokens_per_gpu_s: float  # trained (prompt + response) tokens per second per GPU, all GPUs counted
    rollout_idle: float  # share of the rollout GPUs' time with nothing in flight
    train_idle: float  # share of the training GPUs' time without a step (colocated: the same GPUs as rollout)

    def __post_init__(self):
        for name in ("step_s", "tokens_per_gpu_s", "rollout_idle", "train_idle"):
            setattr(self, name, float(getattr(self, name)))


def load_rates(path: str) -> Rates:
    """Rates from a JSON object whose keys are Rates fields; missing keys keep their defaults."""
    data = json.loads(open(path).read())
    names = [f.name for f in dataclasses.fields(Rates)]
    for key in data:
        if key not in names:
            raise ValueError(f"{path}: unknown rate key {key!r} (expected one of {', '.join(names)})")
    return Rates(**{key: float(value) for key, value in data.items()})


class _Pool:
    """In-flight sequences in `slots` per GPU. Within a segment (no admission, no interrupt) the finish times are
    closed form: a GPU's sequences all advance at min(seq_tok_s, decode_tok_s / active), so they finish in order
    of remaining length, after the GPU's prefill."""

    def __init__(self, gpus: int, slots: int, rates: Rates, prompt_len: int):
        self.rates, self.prompt_len, shape = rates, prompt_len, (gpus, max(1, slots))
        self.rem, self.prefix, self.full = np.zeros(shape), np.zeros(shape), np.zeros(shape)
        self.gid, self.fresh = np.full(shape, -1), np.zeros(shape, bool)

    def active(self) -> np.ndarray:
        return self.gid >= 0

    def place(self, gids: np.ndarray, lengths: np.ndarray, prefix: np.ndarray | None = None,
              full: np.ndarray | None = None) -> None:
        """Fill free slots, least-loaded GPU first (round-robin over an empty pool). `lengths`: tokens left to
        generate; `full`: each sequence's whole length (what a restart generates again), `lengths` by default."""
        free = ~self.active()
        key = np.where(free, (~free).sum(1, keepdims=True) + np.cumsum(free, 1), np.iinfo(np.int64).max)
        flat = np.argsort(key, axis=None, kind="stable")[: len(gids)]
        assert len(gids) <= free.sum(), "pool overfilled"
        rows, cols = np.unravel_index(flat, key.shape)
        self.gid[rows, cols], self.rem[rows, cols], self.fresh[rows, cols] = gids, lengths, True
        self.prefix[rows, cols] = 0.0 if prefix is None else prefix
        self.full[rows, cols] = lengths if full is None else full

    def restart(self, stale: np.ndarray) -> int:
        """Sequences of the slots in `stale` start again from their prompt; how many groups restart."""
        self.rem[stale], self.prefix[stale], self.fresh[stale] = self.full[stale], 0.0, True
        return len(np.unique(self.gid[stale]))

    def plan(self) -> np.ndarray:
        """Finish time of every slot from now (inf where empty)."""
        act, r = self.active(), self.rates
        self.offset = (np.where(self.fresh & act, self.prompt_len + self.prefix, 0).sum(1) / r.prefill_tok_s)
        rem = np.where(act, self.rem, 0.0)
        self.order = np.argsort(rem, axis=1, kind="stable")
        self.sorted = np.take_along_axis(rem, self.order, 1)
        self.speed = np.minimum(r.seq_tok_s, r.decode_tok_s / (rem.shape[1] - np.arange(rem.shape[1])))
        self.cum = np.cumsum(np.diff(self.sorted, axis=1, prepend=0.0) / self.speed, axis=1)
        done = np.empty_like(rem)
        np.put_along_axis(done, self.order, self.cum + self.offset[:, None], 1)
        self.done = np.where(act, done, np.inf)
        return self.done

    def advance(self, until: float) -> tuple[np.ndarray, np.ndarray]:
        """Run the planned segment for `until` seconds: (finished sequences' group ids, each GPU's busy time)."""
        act = self.active()
        tau = np.clip(until - self.offset, 0.0, None)
        phase = (self.cum <= tau[:, None]).sum(1)  # sequences (in length order) finished per GPU
        at = lambda a: np.where(phase > 0, np.take_along_axis(a, np.maximum(phase - 1, 0)[:, None], 1)[:, 0], 0.)  # noqa: E731
        level = at(self.sorted) + (tau - at(self.cum)) * self.speed[np.minimum(phase, len(self.speed) - 1)]
        finished = act & (self.done <= until)
        made = np.where(finished, self.rem, np.minimum(self.rem, level[:, None]))
        busy = np.where(act.any(1), np.minimum(until, np.where(act, self.done, 0).max(1)), 0.0)
        gids = self.gid[finished]
        self.rem, self.prefix = self.rem - made, self.prefix + made
        self.fresh &= ~(until >= self.offset)[:, None]
        self.gid[finished] = -1
        return gids, busy


def _groups_done(pool: _Pool, done: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Groups in the pool and when their last sequence finishes, soonest first."""
    times = np.full(n_groups, -np.inf)
    act = pool.active()
    np.maximum.at(times, pool.gid[act], done[act])
    gids = np.unique(pool.gid[act])
    order = np.argsort(times[gids], kind="stable")
    return gids[order], times[gids][order]


def colocated(w: Workload, rates: Rates, gpus: int, steps: int = 16, partial: bool = False,
              oversample: float = 1.0, staleness: int | None = None) -> Result:
    """Every GPU generates, then every GPU trains. Partial: keep ceil(oversample x B) groups in flight, stop at B
    complete groups, carry the rest (prefix kept, re-prefilled next step); with `staleness` K, a carried group
    first sampled more than K versions before this step's weights restarts from its prompt."""
    rng, B, n = np.random.default_rng(w.seed), w.batch, w.n
    target = math.ceil((oversample if partial else 1.0) * B)
    tokens = np.zeros((steps + 2) * target * 2)
    left = np.zeros(len(tokens), int)
    carry = (np.empty(0, int), np.empty(0), np.empty(0), np.empty(0))  # gid, remaining, prefix, full length
    born = np.zeros(len(tokens), int)  # each group's first version (the weights of step i are version i)
    buffer, made, step_s, step_tok, idle = [], 0, [], [], []
    for i in range(steps):
        if staleness is not None and len(carry[0]):
            stale = born[carry[0]] < i - staleness
            carry = (carry[0], np.where(stale, carry[3], carry[1]), np.where(stale, 0.0, carry[2]), carry[3])
            born[carry[0][stale]] = i
        new = target - len(np.unique(carry[0])) - len(buffer)
        lengths = w.lengths(rng, max(new, 0) * n)
        gids = np.repeat(np.arange(made, made + max(new, 0)), n)
        np.add.at(tokens, gids, lengths + w.prompt_len)
        np.add.at(left, gids, 1)
        born[gids] = i
        made += max(new, 0)
        all_gid = np.concatenate([carry[0], gids])
        pool = _Pool(gpus, math.ceil(len(all_gid) / gpus), rates, w.prompt_len)
        pool.place(all_gid, np.concatenate([carry[1], lengths]), np.concatenate([carry[2], np.zeros(len(gids))]),
                   np.concatenate([carry[3], lengths]))
        done, gen = pool.plan(), 0.0
        if len(buffer) < B:
            order, times = _groups_done(pool, done, len(tokens))
            gen = float(times[B - len(buffer) - 1])
            fin, busy = pool.advance(gen)
            np.subtract.at(left, fin, 1)
            buffer += [g for g in order if left[g] == 0]
            idle.append(float((gen - busy).sum()))
        else:
            idle.append(0.0)
        batch, buffer = buffer[:B], buffer[B:]
        train = tokens[batch].sum() / (gpus * rates.train_tok_s)
        step_s.append(gen + train + rates.push_s + rates.switch_s)
        step_tok.append(tokens[batch].sum())
        act = pool.active()
        carry = (pool.gid[act], pool.rem[act], pool.prefix[act], pool.full[act])
    warm = max(1, steps // 4)
    window = sum(step_s[warm:])
    rollout_idle = sum(idle[warm:]) / (gpus * window)
    return Result(window / (steps - warm), sum(step_tok[warm:]) / window / gpus, rollout_idle, rollout_idle)


def two_pools(w: Workload, rates: Rates, rollout_gpus: int, train_gpus: int, K: int, steps: int = 16,
              partial: bool = False, oversample: float = 1.0, restarts: bool = False) -> Result:
    """Rollout pool and training pool meet at a buffer; batch b is admitted once version >= b-1-K is loaded;
    training step s starts when batch s is complete and step s-1 is done. `restarts` (partial): when batch b+1
    begins, a group in flight whose first token is older than version b-K starts again from its prompt."""
    rng, B, n, Gr = np.random.default_rng(w.seed), w.batch, w.n, rollout_gpus
    extra = round((oversample - 1.0) * B) if partial else 0
    # partial: enough slots to saturate decode, no more than the staleness bound can fill; else one batch
    slots = (max(math.ceil(min(Gr * rates.decode_tok_s / rates.seq_tok_s, ((K + 1) * B + extra) * n) / Gr),
                 math.ceil(n / Gr)) if partial else math.ceil(B * n / Gr))
    pool = _Pool(Gr, slots, rates, w.prompt_len)
    bound = (steps + K + 3) * B + extra
    tokens, left = np.zeros(bound), np.zeros(bound, int)
    t, v, admitted = 0.0, 0, 0
    train_end, train_span, done_g, idle = [0.0], [], [], []  # idle: (starts per GPU, end)
    born, begun = np.zeros(bound, int), 1  # each group's first version; batches begun

    def admit(groups: int) -> None:
        nonlocal admitted
        lengths = w.lengths(rng, groups * n)
        gids = np.repeat(np.arange(admitted, admitted + groups), n)
        np.add.at(tokens, gids, lengths + w.prompt_len)
        np.add.at(left, gids, 1)
        born[gids] = v
        pool.place(gids, lengths)
        admitted += groups

    while len(train_end) <= steps:
        if partial and v + 1 < len(train_end) and train_end[v + 1] <= t:  # interrupt: load the newest version
            t, v = t + rates.push_s, max(i for i, end in enumerate(train_end) if end <= t)
            pool.fresh |= pool.active()  # new weights: the kept prefixes are prefilled again
        if not partial and not pool.active().any():
            need = admitted // B - K  # next batch b = admitted // B + 1 needs version b-1-K
            if need > v and train_end[need] > t:
                idle.append((np.full(Gr, t), train_end[need]))
                t = train_end[need]
            latest = max(i for i, end in enumerate(train_end) if end <= t)
            if latest > v:
                t, v = t + rates.push_s, latest
            admit(B)
        if partial:
            room = min((v + 1 + K) * B + extra - admitted, int((~pool.active()).sum()) // n)
            if room > 0:
                admit(room)
        done = pool.plan()
        act = pool.active()
        if not act.any():  # partial: nothing in flight and nothing admissible until the next push
            idle.append((np.full(Gr, t), train_end[v + 1]))
            t = train_end[v + 1]
            continue
        ends = [done[act].max()]
        if partial and v + 1 < len(train_end):
            ends.append(train_end[v + 1] - t)
        can_admit = partial and admitted < (v + 1 + K) * B + extra
        want_free = max(n, math.ceil(0.1 * pool.gid.size)) - int((~act).sum())
        if can_admit and 0 < want_free <= act.sum():
            ends.append(np.partition(done[act], want_free - 1)[want_free - 1])
        need = len(train_end) * B - len(done_g)
        order, times = _groups_done(pool, done, bound)
        if 1 <= need <= len(times):
            ends.append(times[need - 1])
        seg = float(min(ends))
        fin, busy = pool.advance(seg)
        np.subtract.at(left, fin, 1)
        done_g += [(t + tm, g) for g, tm in zip(order, times) if left[g] == 0 and tm <= seg]
        idle.append((t + busy, t + seg))
        t += seg
        while partial and restarts and len(done_g) >= begun * B:  # batch begun + 1 begins: its update starts
            stale = pool.active() & (born[np.maximum(pool.gid, 0)] < begun - K)  # from version `begun`
            if stale.any():
                pool.restart(stale)
                born[np.unique(pool.gid[stale])] = v
            begun += 1
        while len(train_end) <= steps and len(done_g) >= len(train_end) * B:
            s = len(train_end)
            batch = [g for _, g in done_g[(s - 1) * B: s * B]]
            start = max(done_g[s * B - 1][0], train_end[-1])
            train_end.append(start + tokens[batch].sum() / (train_gpus * rates.train_tok_s))
            train_span.append((start, train_end[-1], tokens[batch].sum()))
    warm = max(1, steps // 4)
    lo, hi = train_end[warm], train_end[steps]
    rollout_idle = sum(np.clip(np.minimum(end, hi) - np.maximum(starts, lo), 0, None).sum() for starts, end in idle)
    trained = sum(max(0.0, min(b, hi) - max(a, lo)) for a, b, _ in train_span)
    return Result((hi - lo) / (steps - warm), sum(tok for *_, tok in train_span[warm:]) / (hi - lo)
                  / (Gr + train_gpus), rollout_idle / (Gr * (hi - lo)), 1.0 - trained / (hi - lo))


def split(gpus: int, fraction: float) -> tuple[int, int]:
    rollout = min(gpus - 1, max(1, round(fraction * gpus)))
    return rollout, gpus - rollout


def predict_table(w: Workload, rates: Rates, gpu_counts=GPU_COUNTS, ks=range(5), steps: int = 16,
                  partial: bool = False, oversample: float = 1.0) -> list[dict]:
    """Per GPU count and K: colocated step time and two pools' speedup (trained tokens/s ratio) at rollout
    fractions 1/2, 3/4 and the best of SPLITS."""
    rows = []
    for gpus in gpu_counts:
        base = colocated(w, rates, gpus, steps, partial, oversample)
        for k in ks:
            runs = {f: two_pools(w, rates, *split(gpus, f), k, steps, partial, oversample) for f in SPLITS}
            best = max(runs, key=lambda f: runs[f].tokens_per_gpu_s)
            speed = {f: r.tokens_per_gpu_s / base.tokens_per_gpu_s for f, r in runs.items()}
            rows.append(dict(gpus=gpus, K=k, coloc_step_s=base.step_s, half=speed[1 / 2], three_q=speed[3 / 4],
                             best_split=split(gpus, best), best=speed[best], best_step_s=runs[best].step_s,
                             best_idle=(runs[best].rollout_idle, runs[best].train_idle)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="print the predicted speedup table")
    parser.add_argument("--rates-json", help="measured rates: a JSON object with Rates fields as keys")
    parser.add_argument("--partial", action="store_true", help="partial rollout on both sides")
    parser.add_argument("--oversample", type=float, default=2.0, help="partial rollout's oversample ratio")
    for flag, default in (("--steps", 16), ("--batch", 128), ("--n", 8), ("--prompt-len", 256), ("--mean-len", 1024),
                          ("--max-len", 8192), ("--seed", 0)):
        parser.add_argument(flag, type=int, default=default)
    args = parser.parse_args()
    if not args.table:
        parser.error("nothing to do: pass --table")
    try:
        rates = load_rates(args.rates_json) if args.rates_json else Rates()
    except ValueError as error:
        raise SystemExit(str(error)) from None
    w = Workload(args.batch, args.n, args.prompt_len, bind(long_tail_lengths, mean=args.mean_len,
                                                             max_len=args.max_len), args.seed)
    oversample = args.oversample if args.partial else 1.0
    print(f"rates: {dataclasses.asdict(rates)}")
    mode = f"partial rollout, oversample {oversample}" if args.partial else "no partial rollout"
    print(f"workload: B={w.batch} prompts x n={w.n}, prompt {w.prompt_len} tokens, responses lognormal(sigma=1) "
          f"mean {args.mean_len:g} clipped to [16, {args.max_len}]; {mode}; {args.steps} steps "
          f"(first {max(1, args.steps // 4)} warm-up), seed {args.seed}")
    print("speedup = two pools' trained tokens/s over colocated's, same GPU count; split = rollout/train GPUs")
    print("| GPUs | K | coloc step s | 1/2 | 3/4 | best split | best | best step s | idle roll/train |")
    print("|---" * 9 + "|")
    for row in predict_table(w, rates, steps=args.steps, partial=args.partial, oversample=oversample):
        rollout, train = row["best_split"]
        print(f"| {row['gpus']} | {row['K']} | {row['coloc_step_s']:.1f} | {row['half']:.2f}x | "
              f"{row['three_q']:.2f}x | {rollout}/{train} | {row['best']:.2f}x | {row['best_step_s']:.1f} | "
              f"{row['best_idle'][0]:.2f}/{row['best_idle'][1]:.2f} |")


if __name__ == "__main__":
    main()
