"""global_profiler.* (verl's names): the global steps in `steps` run under torch.profiler on the global ranks in
`ranks`; each writes save_path/step_<N>_rank<R>.txt (and with `with_trace` the Chrome trace beside it). Every graph
node runs inside the range `dagrl/node/<id>` (record_function: nothing is recorded without an active profiler), so
the table gives per-node host and device totals. Profiling reads no random numbers: results stay the same."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch.profiler import record_function

from dagrl.config.tree import Cfg

logger = logging.getLogger(__name__)

NODE_RANGE = "dagrl/node/"
ROWS = 40  # rows of each op table


def node_range(node_id: str) -> contextlib.AbstractContextManager:
    """The profiler range around one graph node's run."""
    return record_function(NODE_RANGE + node_id)


class StepProfiler:
    def __init__(self, options: Cfg, rank: int | None = None) -> None:
        from dagrl.placement.bridge import global_rank  # RANK in the whole launch, separate pools too

        self.rank = global_rank() if rank is None else rank
        self.steps, ranks = set(options.steps or ()), options.ranks  # every key read, the profiler on or off
        self.active = options.tool == "torch" and self.rank in ranks
        self.save_path, self.with_trace = Path(os.path.expanduser(options.save_path)), options.with_trace

    def run(self, step: int, fn: Callable[[int], Any]) -> Any:
        """fn(step), profiled when global_profiler lists this step and this rank."""
        if not self.active or step not in self.steps:
            return fn(step)
        from torch.profiler import ProfilerActivity, profile

        cuda = torch.cuda.is_available()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        _sync(cuda)
        start = time.perf_counter()
        with profile(activities=activities, record_shapes=False, acc_events=True) as prof:  # one cycle: no warning
            result = fn(step)
            _sync(cuda)
        wall = time.perf_counter() - start
        path = self.write(prof, step, wall, cuda)
        logger.info("profiled step %d on rank %d (%.2f s with the profiler): %s", step, self.rank, wall, path)
        return result

    def write(self, prof, step: int, wall: float, cuda: bool) -> Path:
        """The step's table as a new file (a resumed run profiling the step again adds .1, .2, ...), and the trace."""
        self.save_path.mkdir(parents=True, exist_ok=True)
        text = report(prof.key_averages(), step, self.rank, wall, cuda)
        for index in itertools.count():
            stem = f"step_{step}_rank{self.rank}" + (f".{index}" if index else "")
            try:
                with open(self.save_path / f"{stem}.txt", "x", encoding="utf-8") as out:  # "x": never overwrites
                    out.write(text)
                break
            except FileExistsError:
                continue
        if self.with_trace:
            prof.export_chrome_trace(str(self.save_path / f"{stem}.trace.json.gz"))
        return self.save_path / f"{stem}.txt"


def report(averages, step: int, rank: int, wall: float, cuda: bool) -> str:
    """Wall, kernel and host-op seconds; the dagrl/node ranges' totals; the top ops by self device and self CPU
    time."""
    from torch.autograd import DeviceType

    ops = [e for e in averages if not e.is_user_annotation]  # ranges (dagrl/node/*, Optimizer.step...) hold ops
    nodes = [e for e in averages if e.device_type == DeviceType.CPU and e.key.startswith(NODE_RANGE)]
    device = sum(e.self_device_time_total for e in ops if e.device_type == DeviceType.CUDA) / 1e6  # kernels, copies
    host = sum(e.self_cpu_time_total for e in ops if e.device_type == DeviceType.CPU) / 1e6
    lines = [
        f"dagrl profile: global step {step}, rank {rank}",
        f"step wall time: {wall:.3f} s (with the profiler's overhead)",
        f"device (kernel) time: {device:.3f} s" + ("" if cuda else " (no CUDA: host only)"),
        f"host op time (self CPU time of every op): {host:.3f} s",
        f"host time in the nodes outside ops (their ranges' self CPU time): "
        f"{sum(e.self_cpu_time_total for e in nodes) / 1e6:.3f} s",
        "",
        f"{'node range':<40} {'calls':>6} {'host total s':>13} {'device total s':>15}",
    ]
    lines += [
        f"{e.key:<40} {e.count:>6} {e.cpu_time_total / 1e6:>13.3f} {e.device_time_total / 1e6:>15.3f}"
        for e in sorted(nodes, key=lambda e: -e.cpu_time_total)
    ]
    for sort_by in (["self_device_time_total"] if cuda else []) + ["self_cpu_time_total"]:
        lines += [
            "",
            f"top {ROWS} ops by {sort_by}:",
            averages.table(sort_by=sort_by, row_limit=ROWS, max_name_column_width=90),
        ]
    return "\n".join(lines) + "\n"


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()
