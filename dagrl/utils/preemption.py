"""Preemption: on SIGTERM or SIGUSR1 (what schedulers send before they kill a job) the run stops at the next step
boundary with a checkpoint and exits 0, so the scheduler's requeue resumes it exactly.

The handler only records the signal. At the end of every step the ranks agree on it (a max over the training
ranks, and with separate pools the rollout pool's signal through the launch's store), so they all stop after the
same step. A step that cannot finish and save within the grace the scheduler gives (`trainer.preemption_grace_s`,
what the log compares against) is cut by its kill: checkpoints are atomic, so the newest complete one is untouched.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import time

import torch

from dagrl.utils import dist

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
STORE_KEY = "dagrl/preempted"


def restart_count() -> int:
    """How many times a launcher restarted this run's workers (torchrun --max-restarts, trainer.max_restarts)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", os.environ.get("DAGRL_RESTARTS", "0")) or 0)


class StopRequest:
    """Records a stop signal in this process; `agreed()` says whether any rank got one (collective)."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.at = 0.0
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            for sig in SIGNALS:
                signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame) -> None:
        if self.signal is None:
            self.signal, self.at = signal.Signals(signum).name, time.monotonic()
            logger.warning("%s received: stopping with a checkpoint after the current step", self.signal)

    def agreed(self, store=None) -> str | None:
        """The signal any rank of this pool (or, through `store`, of the other pool) received; every rank of the
        pool calls it at the same point."""
        name = self.signal
        if name is None and store is not None and store.check([STORE_KEY]):
            name = store.get(STORE_KEY).decode()
        flag = dist.global_max(torch.tensor([0.0 if name is None else 1.0]))
        if flag[0] == 0:
            return None
        return name or "a stop signal on another rank"

    def announce(self, store) -> None:
        """Tell the other pool (its store) that this process got a stop signal."""
        if self.signal is not None and not store.check([STORE_KEY]):
            store.set(STORE_KEY, self.signal)

    def seconds_since(self) -> float:
        return time.monotonic() - self.at if self.signal is not None else 0.0
