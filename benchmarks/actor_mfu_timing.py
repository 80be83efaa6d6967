"""Timing and profiling one training step for benchmarks/actor_mfu.py: the same-run bf16 matmul ceiling, timed
rounds of several steps in rotated order with their peak memory, and one step under the torch profiler or cProfile."""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.distributed as dist

from benchmarks.common import cpu_profile


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def matmul_peak_tflops(size: int = 8192, iters: int = 20) -> float:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    size = size if device == "cuda" else 512
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync()
    start = time.perf_counter()
    for _ in range(iters):
        a @ b
    sync()
    return 2 * size**3 * iters / (time.perf_counter() - start) / 1e12


def profile_step(step, name: str, out_dir: str) -> None:
    """One step under the torch profiler: the ops by device time and by host time (rank 0 writes
    `out_dir/<name>_kernels.txt`), how busy the GPU was (the sum of kernel times over the step's wall time;
    concurrent streams can exceed 1) and the host's own time."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    sync()
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        step()
        sync()
    wall = time.perf_counter() - start
    averages = prof.key_averages()
    busy = sum(e.self_device_time_total for e in averages if e.device_type == DeviceType.CUDA) / 1e6  # kernels only
    host = sum(e.self_cpu_time_total for e in averages if e.device_type == DeviceType.CPU) / 1e6
    if dist.get_rank() == 0:
        tables = [
            averages.table(sort_by=key, row_limit=40, max_name_column_width=90)
            for key in (["self_device_time_total"] if torch.cuda.is_available() else []) + ["self_cpu_time_total"]
        ]
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        Path(out_dir, f"{name}_kernels.txt").write_text("\n\n".join(tables))
        print(
            f"{name}: profiled step {wall:.3f} s (with profiler overhead), kernels {busy:.3f} s "
            f"({busy / wall:.2f} of the wall), host ops {host:.3f} s\n" + "\n".join(tables[0].splitlines()[:18]),
            flush=True,
        )


def python_profile(step, name: str, out_dir: str) -> None:
    """One step under cProfile (rank 0 writes `out_dir/<name>_python.txt`, functions by own time): where a
    host-bound step's Python time goes, which the torch profiler's op tables do not show."""
    sync()
    text = cpu_profile(lambda: (step(), sync()), "tottime", 60)
    if dist.get_rank() == 0:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        Path(out_dir, f"{name}_python.txt").write_text(text)
        print(f"{name}: cProfile of one step\n" + "\n".join(text.splitlines()[:30]), flush=True)


def timed_steps(step, steps: int, above_resident: bool) -> tuple[list[float], float]:
    """(seconds of each of `steps` calls, peak GiB allocated during them; with `above_resident`, less what was
    allocated before them)."""
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    resident = torch.cuda.memory_allocated() if torch.cuda.is_available() else 0
    times = []
    for _ in range(steps):
        sync()
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() - (resident if above_resident else 0) if torch.cuda.is_available() else 0
    return times, peak / 2**30


def rounds_of(steps: dict, warmup: int, per_round: int, rounds: int) -> dict[str, tuple[list[float], float]]:
    """Each step `warmup` times, then `rounds` rounds of `per_round` timed calls of each, the order rotated every
    round: {name: (all times, peak GiB: above the resident when there are several steps)}."""
    for step in steps.values():
        for _ in range(warmup):
            step()
    out: dict[str, tuple[list[float], float]] = {name: ([], 0.0) for name in steps}
    names = list(steps)
    for index in range(rounds):
        for name in names[index % len(names) :] + names[: index % len(names)]:
            times, peak = timed_steps(steps[name], per_round, above_resident=len(steps) > 1)
            out[name] = (out[name][0] + times, max(out[name][1], peak))
    return out
