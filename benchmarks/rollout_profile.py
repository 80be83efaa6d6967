"""Where two paths' seconds part, function by function: one cProfile'd call of each, and the functions whose own
time (tottime) differs most between them. dagrl runs vLLM's engine core in the calling process
(VLLM_ENABLE_V1_MULTIPROCESSING=0), so the scheduler, the model runner's launches and the output processing are all
profiled; time on the GPU shows as waits where the host synchronises with it."""

from __future__ import annotations

import cProfile
import pstats
from typing import Any, Callable

Key = tuple[str, int, str]  # pstats' (file, line, function)


def profile(fn: Callable[[], Any]) -> pstats.Stats:
    profiler = cProfile.Profile()
    profiler.runcall(fn)
    return pstats.Stats(profiler)


def own_times(stats: pstats.Stats) -> dict[Key, tuple[float, int]]:
    """{function: (own seconds, calls)}."""
    return {key: (tottime, calls) for key, (_, calls, tottime, _, _) in stats.stats.items()}


def _name(key: Key) -> str:
    file, line, function = key
    if file == "~":  # a builtin: pstats names it in the function field
        return function
    tail = "/".join(file.split("/")[-2:])
    return f"{tail}:{line}({function})"


def function_diff(a: pstats.Stats, b: pstats.Stats, names: tuple[str, str], top: int = 15) -> str:
    """A markdown table of the `top` functions by |own seconds in a - own seconds in b|, with both call counts,
    under a line with both totals."""
    times_a, times_b = own_times(a), own_times(b)
    rows = []
    for key in set(times_a) | set(times_b):
        (sa, ca), (sb, cb) = times_a.get(key, (0.0, 0)), times_b.get(key, (0.0, 0))
        rows.append((sa - sb, key, sa, sb, ca, cb))
    rows.sort(key=lambda row: (-abs(row[0]), _name(row[1])))
    first, second = names
    lines = [
        f"profiled call: {first} {a.total_tt:.3f} s, {second} {b.total_tt:.3f} s (this process's own time, "
        f"functions ranked by |{first} - {second}|)",
        f"| function | {first} s | {second} s | {first} - {second} s | {first} calls | {second} calls |",
        "|---|---|---|---|---|---|",
    ]
    for diff, key, sa, sb, ca, cb in rows[:top]:
        lines.append(f"| {_name(key)} | {sa:.4f} | {sb:.4f} | {diff:+.4f} | {ca} | {cb} |")
    return "\n".join(lines)
