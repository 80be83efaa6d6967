"""How steady the host's CPU is: one fixed pure-Python workload (dict and list work, as a scheduler's) timed again
and again for --seconds, and its times per window of --window seconds. A rollout on a small model is bound by the
host (the scheduler and the launches between GPU steps), so a host whose speed drifts makes any timing of it drift.

usage: python3 benchmarks/host_speed.py [--seconds 60] [--window 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def work(n: int = 20_000) -> int:
    """A fixed amount of interpreter work: dict inserts and lookups, list appends, integer arithmetic."""
    table, out = {}, []
    for i in range(n):
        table[i] = i * 7 % 13
    for i in range(n):
        out.append(table.get(i, 0) + len(out))
    return sum(out)


def workload_ms(repeats: int = 3) -> float:
    """Milliseconds of the workload, the fastest of `repeats`: the host's speed now, in one reading."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times) * 1e3


def sample(seconds: float) -> list[tuple[float, float]]:
    """(seconds since start, seconds one workload took), for as long as asked."""
    start, samples = time.perf_counter(), []
    while (now := time.perf_counter()) - start < seconds:
        work()
        samples.append((now - start, time.perf_counter() - now))
    return samples


def windows(samples: list[tuple[float, float]], window: float) -> list[tuple[float, list[float]]]:
    """(start, the workload's times that began in [start, start + window)) for each window holding any."""
    out, start = [], 0.0
    while start <= samples[-1][0]:
        if times := [t for at, t in samples if start <= at < start + window]:
            out.append((start, times))
        start += window
    return out


def table(samples: list[tuple[float, float]], window: float) -> str:
    lines = ["| window s | runs | median ms | min ms | max ms | median / overall median |", "|---|---|---|---|---|---|"]
    overall = statistics.median(t for _, t in samples)
    for start, times in windows(samples, window):
        med = statistics.median(times)
        lines.append(
            f"| {start:.0f}-{start + window:.0f} | {len(times)} | {med * 1e3:.2f} | {min(times) * 1e3:.2f} | "
            f"{max(times) * 1e3:.2f} | {med / overall:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    samples = sample(args.seconds)
    medians = [statistics.median(times) for _, times in windows(samples, args.window)]
    result = {
        "runs": len(samples),
        "median_ms": statistics.median(t for _, t in samples) * 1e3,
        "window_median_spread": (max(medians) - min(medians)) / statistics.median(medians),
    }
    print(table(samples, args.window))
    print(
        f"{result['runs']} runs, median {result['median_ms']:.2f} ms; the windows' medians spread "
        f"{result['window_median_spread']:.1%} of their median"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({**result, "samples": samples}))
    return result


if __name__ == "__main__":
    main()
