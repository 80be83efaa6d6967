"""The arithmetic of benchmarks/rollout.py, apart from any GPU: the interleaved order of the timed runs, the paired
ratios and the verdict that certifies one, the per-repeat table beside what was probed, which probe moves with the
time, and the bf16/fp8 comparison. Plain data in, text out, so CPU tests cover all of it."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

MIN_PAIRS = 3  # fewer paired repeats certify nothing: two ratios always "agree" with their own spread


@dataclass
class Run:
    """One timed call of one path: its seconds, the tokens it generated and what the probe saw around it."""

    path: str
    pair: int
    seconds: float
    tokens: int
    probe: dict[str, float | None] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


def order(pairs: int, first: str, second: str) -> list[tuple[int, str]]:
    """The timed runs: pair by pair, the path that goes first alternating (A B, B A, A B, ...), so that drift over
    the run and whatever the first call after the other path pays fall on both paths alike."""
    runs = []
    for pair in range(pairs):
        a, b = (first, second) if pair % 2 == 0 else (second, first)
        runs += [(pair, a), (pair, b)]
    return runs


def paired_ratios(runs: list[Run], path: str, base: str) -> list[float]:
    """Per pair, `path`'s tokens/s over `base`'s: the ratio of two runs that ran next to each other."""
    by = {(r.pair, r.path): r for r in runs}
    pairs = sorted({r.pair for r in runs})
    return [by[p, path].rate / by[p, base].rate for p in pairs if (p, path) in by and (p, base) in by]


def host_paired_ratios(runs: list[Run], path: str, base: str, field: str = "host ms") -> list[float] | None:
    """The paired ratios with each call's seconds counted in its host's speed (seconds / the probe's `field`, the
    fixed workload's milliseconds around the call): what the ratio would be had both calls of a pair had the same
    host, for calls bound by the host. None unless every run of both paths has the reading."""
    if any(r.probe.get(field) is None for r in runs if r.path in (path, base)):
        return None
    scaled = [Run(r.path, r.pair, r.seconds / r.probe[field], r.tokens) for r in runs]  # type: ignore[operator]
    return paired_ratios(scaled, path, base)


@dataclass(frozen=True)
class Verdict:
    median: float
    low: float
    high: float
    pairs: int

    @property
    def spread(self) -> float:
        return self.high - self.low

    @property
    def distance(self) -> float:
        return abs(self.median - 1.0)

    @property
    def certified(self) -> bool:
        """The paired ratios spread less than the median lies from 1.0: no rerun within that spread flips it."""
        return self.pairs >= MIN_PAIRS and self.spread < self.distance

    def line(self, path: str, base: str) -> str:
        spread, distance = _apart(self.spread, self.distance)
        head = (
            f"{path} / {base}: median {self.median:.3f} over {self.pairs} paired repeats "
            f"(min-max {self.low:.3f}-{self.high:.3f}, spread {spread}; |median - 1| = {distance})"
        )
        if self.pairs < MIN_PAIRS:
            return f"{head}: NOT CERTIFIED, {self.pairs} pair(s) (at least {MIN_PAIRS}: raise --repeats)"
        if self.certified:
            side = "slower" if self.median < 1 else "faster"
            return f"{head}: CERTIFIED {side} ({spread} < {distance})"
        return (
            f"{head}: within noise ({spread} >= {distance}); the columns beside the times below "
            f"say what moved with them"
        )


def _apart(a: float, b: float) -> tuple[str, str]:
    """a and b with 3 decimals, or as many more as it takes (up to 6) for a comparison of two unequal numbers not
    to print them alike ("0.071 < 0.071")."""
    for digits in range(3, 7):
        left, right = f"{a:.{digits}f}", f"{b:.{digits}f}"
        if left != right or a == b:
            break
    return left, right


def verdict(ratios: list[float]) -> Verdict:
    if not ratios:
        raise ValueError("no paired repeats: both paths must run in every pair")
    return Verdict(statistics.median(ratios), min(ratios), max(ratios), len(ratios))


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def repeat_table(runs: list[Run], fields: list[str]) -> str:
    """Every timed run in the order it ran: seconds, tokens, tokens/s and each probe field."""
    lines = [
        "| pair | path | s | generated tokens | tokens/s | " + " | ".join(fields) + " |",
        "|---" * (5 + len(fields)) + "|",
    ]
    for r in runs:
        cells = [_cell(r.probe.get(name)) for name in fields]
        lines.append(
            f"| {r.pair} | {r.path} | {r.seconds:.2f} | {r.tokens} | {r.rate:,.0f} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def summary_table(runs: list[Run]) -> str:
    """Per path: median, min and max seconds and tokens/s, and the tokens each repeat generated."""
    lines = ["| path | median s | min s | max s | median tokens/s | generated tokens per repeat |", "|---" * 6 + "|"]
    for path in dict.fromkeys(r.path for r in runs):
        mine = [r for r in runs if r.path == path]
        seconds = [r.seconds for r in mine]
        tokens = sorted({r.tokens for r in mine})
        counts = str(tokens[0]) if len(tokens) == 1 else ", ".join(str(r.tokens) for r in mine)
        lines.append(
            f"| {path} | {statistics.median(seconds):.2f} | {min(seconds):.2f} | {max(seconds):.2f} | "
            f"{statistics.median(r.rate for r in mine):,.0f} | {counts} |"
        )
    return "\n".join(lines)


def _ranks(values: list[float]) -> list[float]:
    """Average ranks (ties share theirs), for Spearman's correlation."""
    ordered = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and values[ordered[j + 1]] == values[ordered[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[ordered[k]] = (i + j) / 2
        i = j + 1
    return ranks


def spearman(x: list[float], y: list[float]) -> float | None:
    """Rank correlation of x and y; None when either is constant (nothing moved) or there are under 3 points."""
    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    rx, ry = _ranks(x), _ranks(y)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    return cov / math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))


def movers(runs: list[Run], fields: list[str]) -> str:
    """Which probe field moves with the time: each run's seconds over its own path's median (so the two paths'
    difference does not count), against each field, by rank correlation over every run, strongest first."""
    medians = {p: statistics.median(r.seconds for r in runs if r.path == p) for p in {r.path for r in runs}}
    relative = [r.seconds / medians[r.path] for r in runs]
    rows = []
    for name in ["generated tokens", *fields]:
        pairs = [
            (float(r.tokens) if name == "generated tokens" else r.probe.get(name), t) for r, t in zip(runs, relative)
        ]
        pairs = [(v, t) for v, t in pairs if v is not None]
        if not pairs:
            rows.append((name, None, "not probed"))
            continue
        values = [v for v, _ in pairs]
        rho = spearman(values, [t for _, t in pairs])
        spread = f"{_cell(min(values))}-{_cell(max(values))}"
        rows.append((name, rho, spread if rho is not None or len(set(values)) > 1 else f"constant {_cell(values[0])}"))
    rows.sort(key=lambda row: -abs(row[1]) if row[1] is not None else 1)
    lines = [
        "what moves with the time (Spearman rho of each run's s / its path's median against the field, all runs):",
        "| field | rho | range over the runs |",
        "|---|---|---|",
    ]
    lines += [f"| {name} | {'-' if rho is None else f'{rho:+.2f}'} | {span} |" for name, rho, span in rows]
    return "\n".join(lines)


def compare_table(results: dict[str, dict], path: str) -> str:
    """--compare: per arm (bf16, fp8, ...) its engine settings and `path`'s median tokens/s and seconds, and each
    arm's tokens/s over the first arm's. `results`: arm -> the JSON benchmarks/rollout.py writes."""
    arms = list(results)
    base = results[arms[0]]["paths"][path]["median_tokens_per_s"]
    lines = [
        f"| arm | engine | {path} median tokens/s | median s | tokens per repeat | vs {arms[0]} |",
        "|---" * 6 + "|",
    ]
    for arm in arms:
        row = results[arm]["paths"][path]
        tokens = ", ".join(str(t) for t in dict.fromkeys(row["tokens"]))  # one figure when every repeat agrees
        lines.append(
            f"| {arm} | {results[arm]['engine']} | {row['median_tokens_per_s']:,.0f} | {row['median_s']:.2f} | "
            f"{tokens} | {row['median_tokens_per_s'] / base:.3f} |"
        )
    return "\n".join(lines)


def path_summary(runs: list[Run], path: str) -> dict:
    """What --json keeps of one path: its times, tokens and medians."""
    mine = [r for r in runs if r.path == path]
    return {
        "seconds": [r.seconds for r in mine],
        "tokens": [r.tokens for r in mine],
        "median_s": statistics.median(r.seconds for r in mine),
        "median_tokens_per_s": statistics.median(r.rate for r in mine),
    }
