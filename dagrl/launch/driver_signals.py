"""A scheduler's stop (SIGTERM, SIGUSR1) to the Ray driver. A scheduler signals the job's process, the driver; Ray
starts each worker in a session of its own, so the workers get nothing, and a driver that died of the signal would
take them with it before any checkpoint. From `launch` on, the driver takes these signals itself:

- while the workers start (joining the cluster, placing and starting them): the launch stops at once, the workers are
  killed and the driver says so in one line and exits 0, as a start-up stop of any dagrl process (StopBeforeStart);
- once they train: the driver passes the signal on to every worker, on its node, as torchrun does; each stops after
  the step under way with its checkpoint (utils/preemption.py) and the driver exits 0 with one line (`Stopped`). A
  repeated signal is not passed on again: the workers have it, and the scheduler's kill follows its grace.

Ray raises a signal handler's KeyboardInterrupt out of its blocking calls (ray.init, ray.get, ray.wait) as its own
and only prints any other exception, so the handler records the signal and raises KeyboardInterrupt, which the
launcher tells from a Ctrl-C by `take()`. Once the workers train it raises only inside `waiting()` (around ray.wait),
so the watch loop is never cut elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Iterator

from dagrl.utils.preemption import START_SIGNALS


class Stopped(Exception):
    """The workers stopped on the SIGTERM/SIGUSR1 the driver passed on: (the signal's name, the workers' line where
    they said one: a stop during their start-up)."""

    def line(self, advice: str) -> str:
        name, said = self.args
        return said or f"{name}: the Ray workers stopped after the step under way, with its checkpoint; {advice}"


class DriverSignals:
    """SIGTERM/SIGUSR1 handlers of the driver while it launches and watches the workers (a context manager: the
    previous handlers come back at its end; a signal the driver was started ignoring stays ignored)."""

    def __init__(self) -> None:
        self.names: list[str] = []  # every stop signal received, in order
        self.handled = 0  # how many of them the launcher has taken
        self.watching = False  # the workers train: raise only inside waiting()
        self.in_wait = False
        self.previous: dict = {}

    def __enter__(self) -> DriverSignals:
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for sig in START_SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def reinstall(self) -> None:
        """After ray.init, whose failure-signal handler (C++, unseen by signal.getsignal) took SIGTERM over: it
        would end the driver with exit code 1 and no checkpoint."""
        for sig in self.previous:
            signal.signal(sig, self._handle)

    def __exit__(self, *exc) -> None:
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)

    def _handle(self, signum: int, frame) -> None:
        first = not self.names
        self.names.append(signal.Signals(signum).name)
        if first and (not self.watching or self.in_wait):
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Around a blocking wait for the workers: a stop signal breaks it (one that came before it, too)."""
        self.in_wait = True
        try:
            if len(self.names) > self.handled:
                raise KeyboardInterrupt
            yield
        finally:
            self.in_wait = False

    def take(self) -> str | None:
        """The stop signal not yet taken (its name), or None: the KeyboardInterrupt was a Ctrl-C."""
        if len(self.names) <= self.handled:
            return None
        self.handled = len(self.names)
        return self.names[0]


def _send(pid: int, signum: int) -> None:
    os.kill(pid, signum)


def forward(where: list[tuple[str, int]], signum: int) -> None:
    """`signum` to every worker, (node id, pid), sent from a task on the worker's own node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    send = ray.remote(num_cpus=0)(_send)
    ray.get(
        [
            send.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(pid, signum)
            for node, pid in where
        ]
    )
