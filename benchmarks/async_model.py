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
from dataclasses import dataclass
from functools import partial as bind

import numpy as np

GPU_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024)
SPLITS = (1 / 8, 1 / 4, 3 / 8, 1 / 2, 5 / 8, 3 / 4, 7 / 8)  # rollout fractions searched for the best split

try:  # imported as benchmarks.async_model (the tests), or with benchmarks/ on the path (async_pipeline.py, the CLI)
    from .async_sim import Buffers, Rates, Workload, load_rates, long_tail_lengths
except ImportError:
    from async_sim import Buffers, Rates, Workload, load_rates, long_tail_lengths


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
    buffers = Buffers(w, rates, gpus, steps, oversample if partial else 1.0)
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
    buffers, R = Buffers(w, rates, rollout_gpus, steps, oversample if partial else 1.0), rollout_gpus
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
