"""Hang detection: every rank reports progress; a rank that makes none for `trainer.hang_timeout_s` says where it is
stuck and exits, so a hung run ends (and a launcher's restart can resume it) instead of burning its allocation.

Progress is a `beat(phase, step)`: every node start and checkpoint phase (through dagrl/utils/faults.fault_point),
every engine scheduling step and micro-batch, every validation chunk, and every poll while waiting on the other pool
within the staleness bound. A daemon thread checks the time since the last beat once a second; start-up (building
engines, loading weights) has its own allowance, `trainer.hang_startup_timeout_s`. When it fires, the rank writes
every thread's Python stack (faulthandler) and its phase and step to `<default_local_dir>/hang/rank<R>.txt`, dumps
PyTorch's NCCL flight recorder beside it on GPU (`rank<R>.nccl_trace.pkl`; the recorder is switched on through
TORCH_FR_BUFFER_SIZE before the process group starts), prints one line naming the rank, step and phase, and
exits with code 3. It first marks the hang in the launch's store (`attach`): every other rank's watchdog sees the
mark within a second and writes its own stacks beside (where it was when a peer hung) before exiting too, so a peer
that a dead rank's broken connection would otherwise end with a bare error leaves its stacks as well.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import threading
import time
from pathlib import Path

logger = logging.getLogger(__name__)

HANG_EXIT_CODE = 3
HANG_KEY = "dagrl/hang"
PEER_GRACE_S = 3.0  # how long the hung rank waits for its peers to write their stacks before it exits
TRACE_BUFFER_VAR = "TORCH_FR_BUFFER_SIZE"  # the NCCL flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE before torch 2.11)
_current: "Watchdog | None" = None


def beat(phase: str, step: int | None = None) -> None:
    """Progress: this rank is in `phase` (of `step`) and not stuck. No effect without a watchdog."""
    if _current is not None:
        _current.beat(phase, step)


def started() -> None:
    """Start-up is over: the run's own timeout applies from here."""
    if _current is not None:
        _current.startup = False
        _current.beat("started")


def attach(store) -> None:
    """The launch's store: where a hang is announced to every rank (after the process group started)."""
    if _current is not None:
        _current.store = store


def stop() -> None:
    """The run is over: the watchdog thread ends (joined, so it is not inside a store call while the interpreter
    shuts down: that aborts the process, "terminate called without an active exception")."""
    global _current
    watchdog, _current = _current, None
    if watchdog is not None:
        watchdog.stopped.set()  # wakes the thread at once: every run's exit would otherwise wait up to 1 s here
        watchdog.thread.join(timeout=5)


def install(timeout_s: float, startup_s: float, directory: str, rank: int) -> "Watchdog | None":
    """Watch this process (timeout 0: no watchdog). Call before the process group starts, so that the NCCL flight
    recorder is on."""
    global _current
    if timeout_s <= 0:
        return None
    os.environ.setdefault(TRACE_BUFFER_VAR, "2000")  # PyTorch records the last collectives, to dump on a hang
    _current = Watchdog(timeout_s, startup_s, Path(os.path.expanduser(directory)) / "hang", rank)
    return _current


class Watchdog:
    def __init__(self, timeout_s: float, startup_s: float, directory: Path, rank: int) -> None:
        self.timeout_s, self.startup_s, self.directory, self.rank = timeout_s, startup_s, directory, rank
        self.phase, self.step, self.startup = "start-up", 0, True
        self.last = time.monotonic()
        self.store = None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="dagrl-watchdog", daemon=True)
        self.thread.start()

    def beat(self, phase: str, step: int | None = None) -> None:
        self.last = time.monotonic()
        self.phase = phase
        if step is not None:
            self.step = step

    def _watch(self) -> None:
        while not self.stopped.wait(min(1.0, self.timeout_s / 10)):
            idle = time.monotonic() - self.last
            if idle > (self.startup_s if self.startup else self.timeout_s):
                self.fire(idle)
            if self.store is not None and self.store.check([HANG_KEY]):  # a peer hung: say where this rank is
                peer = self.store.get(HANG_KEY).decode()
                self.dump(f"rank {self.rank}: stopped because {peer}; here for {idle:.0f} s in {self.where}")
                os._exit(HANG_EXIT_CODE)

    @property
    def where(self) -> str:
        return f"phase {self.phase}" + ("" if self.startup else f" of step {self.step}")

    def fire(self, idle: float) -> None:
        """Tell the peers, write the stacks and the NCCL trace, say where this rank is stuck, exit."""
        where = self.where
        if self.store is not None:
            self.store.set(HANG_KEY, f"rank {self.rank} hung in {where}")
        path, trace = self.dump(f"rank {self.rank}: no progress for {idle:.0f} s in {where} (pid {os.getpid()})")
        print(
            f"dagrl: error: rank {self.rank} hung: no progress for {idle:.0f} s in {where} "
            f"(trainer.hang_timeout_s={self.timeout_s:g}); every thread's stack is in {path}"
            + (f", the NCCL flight recorder's trace in {trace}" if trace else "")
            + (" (the other ranks' beside it)" if self.store is not None else ""),
            file=sys.stderr,
            flush=True,
        )
        if self.store is not None:
            time.sleep(PEER_GRACE_S)  # the peers write theirs before this rank's exit breaks their connections
        os._exit(HANG_EXIT_CODE)

    def dump(self, header: str) -> tuple[Path, Path | None]:
        """rank<R>.txt: `header` and every thread's stack; the NCCL trace beside it on GPU."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"rank{self.rank}.txt"
        with open(path, "w", encoding="utf-8") as out:
            out.write(header + "\n\n")
            out.flush()
            faulthandler.dump_traceback(out, all_threads=True)
        return path, self.dump_nccl_trace()

    def dump_nccl_trace(self) -> Path | None:
        """PyTorch's NCCL flight recorder (GPU runs); None where there is none (CPU, gloo)."""
        import torch

        if not torch.cuda.is_available() or not torch.distributed.is_initialized():
            return None
        try:
            from torch._C._distributed_c10d import _dump_nccl_trace

            data = _dump_nccl_trace()
        except (ImportError, RuntimeError) as err:  # a torch without the recorder: the stacks are still written
            logger.error("rank %d: no NCCL flight-recorder dump (%s)", self.rank, err)
            return None
        path = self.directory / f"rank{self.rank}.nccl_trace.pkl"
        path.write_bytes(data)
        return path
