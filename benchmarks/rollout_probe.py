"""What benchmarks/rollout.py records around each timed call, so that one GPU run says which of them moves with the
time: the GPU's SM clock, temperature and power (nvidia-smi sampling through the call: one process, no Python thread
beside vLLM's host-bound loop), the torch allocator's reserved bytes, the host's load average, Python garbage
collections during the call (all, the full ones, the seconds inside them), the host's own speed just before and after
the call (benchmarks/host_speed.py's fixed interpreter workload: a host-bound rollout slows with its host), and from
vLLM's outputs the prompt tokens served from the prefix cache and the time to each request's first token where vLLM
reports it. A field that cannot be read here is None (a dash in the table) and `notes` says why, once."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import statistics
import subprocess
import time
from typing import Any

from benchmarks.host_speed import workload_ms

GPU_FIELDS = ("clocks.sm", "temperature.gpu", "power.draw")
FIELDS = [
    "SM MHz (mean)",
    "SM MHz (min)",
    "temp C (max)",
    "power W (mean)",
    "reserved GiB",
    "load 1 min",
    "gc runs",
    "gc full runs",
    "gc s",
    "host ms",
    "cached prompt tokens",
    "TTFT s (median)",
]


def parse_smi(text: str) -> dict[str, float | None]:
    """nvidia-smi's `clocks.sm, temperature.gpu, power.draw` lines (csv, noheader, nounits) as the GPU fields;
    a value nvidia-smi could not read ("[N/A]") is left out of its statistic."""
    clocks, temps, power = [], [], []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(GPU_FIELDS):
            continue
        for cell, into in zip(cells, (clocks, temps, power)):
            try:
                into.append(float(cell))
            except ValueError:  # "[N/A]", "[Not Supported]": that sample has no such value
                pass
    return {
        "SM MHz (mean)": statistics.fmean(clocks) if clocks else None,
        "SM MHz (min)": min(clocks) if clocks else None,
        "temp C (max)": max(temps) if temps else None,
        "power W (mean)": statistics.fmean(power) if power else None,
    }


def gpu_id() -> str:
    """The nvidia-smi id of this process's GPU: CUDA_VISIBLE_DEVICES's entry for it (an index or a UUID), else
    the device index."""
    import torch

    index = torch.cuda.current_device()
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[index] if index < len(visible) else str(index)


def gc_runs(generation: int | None = None) -> int:
    """Collections so far: of every generation, or of one (2: the full collections, which walk every object the
    process tracks: a trainer's models and engines included)."""
    stats = gc.get_stats()
    return sum(g["collections"] for g in (stats if generation is None else stats[generation : generation + 1]))


class GcTimer:
    """Seconds spent inside garbage collections while installed (gc.callbacks: called at each one's start and
    stop), so a call's time can be split into collections and the rest."""

    def __init__(self) -> None:
        self.seconds, self._start = 0.0, None
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        elif self._start is not None:
            self.seconds += time.perf_counter() - self._start
            self._start = None

    def close(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)


def output_fields(outputs: list[Any]) -> dict[str, float | None]:
    """From vLLM's RequestOutputs: prompt tokens served from the prefix cache (num_cached_tokens; each call starts
    from an empty cache, so this is what the n samples of a prompt share within the call) and the median time from
    arrival to first token (RequestOutput.metrics, when this vLLM fills it in)."""
    cached = [o.num_cached_tokens for o in outputs if getattr(o, "num_cached_tokens", None) is not None]
    ttft = [t for t in (first_token_s(getattr(o, "metrics", None)) for o in outputs) if t is not None]
    return {
        "cached prompt tokens": float(sum(cached)) if cached else None,
        "TTFT s (median)": statistics.median(ttft) if ttft else None,
    }


def first_token_s(metrics: Any) -> float | None:
    """Seconds to a request's first token from vLLM's per-request metrics: its own latency field where it has
    one, else first-token time less arrival time; None where neither is there (vLLM's engine core keeps them
    unless stats logging is on)."""
    if metrics is None:
        return None
    latency = getattr(metrics, "first_token_latency", None)
    if latency:
        return float(latency)
    first, arrival = getattr(metrics, "first_token_ts", None), getattr(metrics, "arrival_time", None)
    if first and arrival and first >= arrival:
        return float(first - arrival)
    return None


class Probe:
    """start() before a timed call, stop(outputs) after it: one dict of FIELDS. On a machine without CUDA or
    nvidia-smi the GPU fields are None and `notes` says so."""

    def __init__(self, interval_ms: int = 200) -> None:
        import torch

        self.cuda = torch.cuda.is_available()
        self.smi = shutil.which("nvidia-smi") if self.cuda else None
        self.interval_ms = interval_ms
        self.notes: list[str] = []
        if not self.cuda:
            self.notes.append("no CUDA here: GPU clock, temperature, power and allocator fields not probed")
        elif not self.smi:
            self.notes.append("no nvidia-smi on PATH: GPU clock, temperature and power not probed")
        self._sampler: subprocess.Popen | None = None
        self._gc = self._gc_full = 0
        self._gc_timer = GcTimer()
        self._gc_s = self._host_ms = 0.0

    def start(self) -> None:
        self._host_ms = workload_ms()
        self._gc, self._gc_full, self._gc_s = gc_runs(), gc_runs(2), self._gc_timer.seconds
        if self.smi:
            query = ["--query-gpu=" + ",".join(GPU_FIELDS), "--format=csv,noheader,nounits"]
            # line-buffered through stdbuf where there is one, so that stopping it loses no sample
            line_buffered = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []
            self._sampler = subprocess.Popen(
                [*line_buffered, self.smi, *query, "-i", gpu_id(), "-lms", str(self.interval_ms)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )

    def close(self) -> None:
        """Stop timing garbage collections (the timer is a gc callback for as long as the probe is open)."""
        self._gc_timer.close()

    def stop(self, outputs: list[Any]) -> dict[str, float | None]:
        import torch

        fields: dict[str, float | None] = dict.fromkeys(FIELDS)
        fields["gc runs"] = float(gc_runs() - self._gc)
        fields["gc full runs"] = float(gc_runs(2) - self._gc_full)
        fields["gc s"] = self._gc_timer.seconds - self._gc_s
        fields["host ms"] = (self._host_ms + workload_ms()) / 2  # around the call: both sides, outside its time
        fields["load 1 min"] = os.getloadavg()[0]
        if self.cuda:
            fields["reserved GiB"] = torch.cuda.memory_reserved() / 2**30
        if self._sampler is not None:
            self._sampler.send_signal(signal.SIGINT)  # nvidia-smi's own way out of its loop
            try:
                text, _ = self._sampler.communicate(timeout=5)
            except subprocess.TimeoutExpired:  # it did not stop: killed, what it printed is still read
                self._sampler.kill()
                text, _ = self._sampler.communicate()
            self._sampler = None
            fields.update(parse_smi(text))
            note = "nvidia-smi gave no samples during a call: GPU clock, temperature and power not probed"
            if fields["SM MHz (mean)"] is None and note not in self.notes:
                self.notes.append(note)
        fields.update(output_fields(outputs))
        for name in ("cached prompt tokens", "TTFT s (median)"):
            note = f"vLLM's outputs carry no {name} (its per-request stats are off unless disable_log_stats=False)"
            if outputs and fields[name] is None and note not in self.notes:
                self.notes.append(note)
        return fields
