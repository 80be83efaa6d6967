"""The dtype a run computes in: `auto` for actor_rollout_ref.actor.megatron.param_dtype and
actor_rollout_ref.rollout.dtype resolves by the machine, decided once per process.

On a GPU `auto` is bfloat16. On a CPU it is bfloat16 only where the CPU has bf16 instructions (AVX-512 BF16 or AMX,
which oneDNN's bf16 kernels need): without them torch's bf16 matmul emulates bf16 and runs tens of times slower than
float32 (an lm-head-shaped product on an AVX2 CPU: 133.6 s in bf16, 0.62 s in fp32), so `auto` trains in float32.
The decision reads the capability rather than a timing, so a loaded machine cannot flip it; a small measured probe
only gives the slowdown the start-up line and the warning report. Imports torch only when a machine is detected.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any, Mapping

PARAM_DTYPE = "actor_rollout_ref.actor.megatron.param_dtype"
ROLLOUT_DTYPE = "actor_rollout_ref.rollout.dtype"
KEYS = (PARAM_DTYPE, ROLLOUT_DTYPE)
NAMES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16"}
CHOICES = (*NAMES, "auto")


@dataclass(frozen=True)
class Machine:
    """What the precision choice depends on. `slowdown`: bf16 matmul time / fp32 time, measured on a CPU without
    bf16 instructions (None elsewhere)."""

    gpu: bool
    bf16_native: bool
    isa: str
    slowdown: float | None = None

    @property
    def auto(self) -> str:
        return "bfloat16" if self.gpu or self.bf16_native else "float32"


GPU = Machine(gpu=True, bf16_native=True, isa="cuda")


def measure_slowdown(size: int = 256) -> float:
    """bf16 / fp32 time of one size^3 matmul, each the best of a few after a warm-up (tens of ms where bf16 is
    emulated). One thread and the best, not the mean, so that other work on the machine counts little: with two
    threads on a busy machine the fp32 product waits for its second thread and the ratio falls to ~1."""
    import torch

    def best(dtype: Any, repeats: int) -> float:
        a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
        a @ b
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - start)
        return min(times)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return best(torch.bfloat16, 3) / max(best(torch.float32, 5), 1e-9)
    finally:
        torch.set_num_threads(threads)


@functools.cache
def detect() -> Machine:
    """This process's machine, detected once."""
    import torch

    if torch.cuda.is_available():
        return GPU
    isa = torch.backends.cpu.get_cpu_capability()
    native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return Machine(gpu=False, bf16_native=native, isa=isa, slowdown=None if native else measure_slowdown())


def resolve(value: Any, machine: Machine | None = None) -> Any:
    """The canonical dtype name of a config value (`auto` by the machine); anything else unchanged (pre-flight
    names it)."""
    if value == "auto":
        return (machine or detect()).auto
    return NAMES.get(value, value) if isinstance(value, str) else value


def _is_bf16(value: Any) -> bool:
    return isinstance(value, str) and NAMES.get(value) == "bfloat16"


def startup_lines(values: Mapping[str, Any], machine: Machine | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(info lines, warning lines) a run on this machine starts with, given {key: configured value} of KEYS: at most
    one of each. The info line says what `auto` chose on a CPU; the warning names every key explicitly set to bf16
    on a CPU without bf16 instructions."""
    if not any(value == "auto" or _is_bf16(value) for value in values.values()):
        return (), ()  # nothing to decide or warn about: no machine detected (no torch import)
    machine = machine or detect()
    if machine.gpu:
        return (), ()
    slower = f"; a bf16 matmul runs {machine.slowdown:.0f}x slower than float32 here" if machine.slowdown else ""
    info, warnings = [], []
    autos = [key for key, value in values.items() if value == "auto"]
    if autos:
        has = "has bf16 instructions" if machine.bf16_native else "has no bf16 instructions"
        what = " and ".join(("training" if key == PARAM_DTYPE else "generating") for key in autos)
        info.append(
            f"this CPU {has} ({machine.isa}{slower}): {what} in {machine.auto} "
            f"({', '.join(f'{key}=auto' for key in autos)})"
        )
    explicit = [key for key, value in values.items() if _is_bf16(value)]
    if explicit and not machine.bf16_native:
        warnings.append(
            f"this CPU has no bf16 instructions ({machine.isa}{slower}), and "
            f"{' and '.join(f'{key}={values[key]}' for key in explicit)} asks for bf16: set "
            f"{' and '.join(f'{key}=auto' for key in explicit)} (float32 here) for a faster run"
        )
    return tuple(info), tuple(warnings)


@functools.cache  # keyed by the lines: the actor, reference, critic and rollout builders all ask, one logs
def announce_once(info: tuple[str, ...], warnings: tuple[str, ...]) -> None:
    """Log the start-up lines once per process."""
    import logging

    logger = logging.getLogger(__name__)
    for line in info:
        logger.info(line)
    for line in warnings:
        logger.warning(line)
