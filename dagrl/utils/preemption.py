"""Stop signals. Preemption: on SIGTERM or SIGUSR1 (what schedulers send before they kill a job) the run stops at the
next step boundary with a checkpoint and exits 0, so the scheduler's requeue resumes it exactly. Ctrl-C (SIGINT) is
handled alike once a step of this launch has begun, and ends with exit code 130 (the shell's code for it) and one
line naming the checkpoint and how to resume.

The handler only records the signal. At the end of every step the ranks agree on it (a max over the training
ranks, and with separate pools the rollout pool's signal through the launch's store), so they all stop after the
same step. A step that cannot finish and save within the grace the scheduler gives (`trainer.preemption_grace_s`,
what the log compares against) is cut by its kill: checkpoints are atomic, so the newest complete one is untouched.
A validation under way when SIGTERM/SIGUSR1 comes stops before its next generation (trainer/validation.py), so the
checkpoint follows at once; its weights are validated when the run resumes. Ctrl-C lets it finish.

Before the trainer's handlers are in place (start-up: composing, pre-flight, building the engines) SIGTERM and
SIGUSR1 stop the process at once with one line and exit 0 (`stop_before_start`): nothing is trained yet, so nothing
is saved; the stack unwinds (StopBeforeStart), so a file being written (the data cache) is removed or completed.

Ctrl-C stops at once, without unwinding the stack (os._exit), where waiting would keep nothing: with no step under
way (start-up, the validation before the first step, after the last), and at a second Ctrl-C (or a Ctrl-C after
SIGTERM). Nothing is left half-written: the metrics and the prompt ledger are flushed line by line, and a checkpoint
being written is a `.tmp_` directory that the next run removes. "At once" is at the main thread's next Python
instruction, where Python runs signal handlers: after the tensor operation under way. Processes the trainer forked
(Megatron's checkpoint writers) get the terminal's Ctrl-C too and leave it to the trainer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import NoReturn

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
START_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # a scheduler's stop during start-up (Ctrl-C: main_dag's handler)
STORE_KEY = "dagrl/preempted"
INTERRUPTED = 130  # the exit code after Ctrl-C
_installed: StopRequest | None = None  # the request whose handlers are in place


def restart_count() -> int:
    """How many times a launcher restarted this run's workers (torchrun --max-restarts, trainer.max_restarts)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", os.environ.get("DAGRL_RESTARTS", "0")) or 0)


def _global_rank() -> int:
    return int(os.environ.get("DAGRL_GLOBAL_RANK", os.environ.get("RANK", "0")))


class StopBeforeStart(BaseException):
    """A stop signal during start-up (not an Exception: no `except Exception` on the way may swallow it)."""

    def line(self) -> str:
        return f"{self.args[0]} before the run started: stopped, nothing to save"


def stop_before_start(signum: int, frame) -> None:
    """The start-up handler of START_SIGNALS: unwind to main_dag, which says so in one line and exits 0. A forked
    helper (a data loader) leaves it to the trainer."""
    if os.getpid() == _main_pid:
        raise StopBeforeStart(signal.Signals(signum).name)


_main_pid = os.getpid()


def install_start_handlers() -> None:
    """SIGTERM/SIGUSR1 stop the start-up (stop_before_start) until the trainer's StopRequest takes them over; a
    signal this process was started ignoring stays ignored."""
    global _main_pid
    _main_pid = os.getpid()
    for sig in START_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, stop_before_start)


class StopRequest:
    """Records a stop signal in this process; `agreed()` says whether any rank got one (collective). `trainer`: the
    run's trainer.* section, which Ctrl-C's line reads (where the checkpoints are, how the run resumes)."""

    def __init__(self, trainer=None, signals: tuple[signal.Signals, ...] = SIGNALS) -> None:
        self.signal: str | None = None
        self.at = 0.0
        self.trainer = trainer
        self.keeps_work = False  # a step of this launch began: stopping at its boundary saves it
        self.stopped_on: str | None = None  # the signal the ranks agreed to stop on
        self.report = ""  # after a Ctrl-C stop, the line for the user (the training pool's rank 0)
        self.pid = os.getpid()
        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            global _installed
            _installed = self
            for sig in signals:  # an ignored Ctrl-C stays so: a script's background job
                if sig != signal.SIGINT or signal.getsignal(sig) is not signal.SIG_IGN:
                    signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame) -> None:
        if os.getpid() != self.pid:  # a forked helper: the trainer decides
            return
        if signum == signal.SIGINT and (self.signal is not None or not self.keeps_work):
            self.exit_now(
                "second Ctrl-C: stopped at once without a checkpoint"
                if self.signal == "SIGINT"
                else f"Ctrl-C after {self.signal}: stopped at once without a checkpoint"
                if self.signal
                else "Ctrl-C with no step under way: stopped at once, nothing unsaved"
            )
        if self.signal is None:
            self.signal, self.at = signal.Signals(signum).name, time.monotonic()
            if signum != signal.SIGINT:
                logger.warning("%s received: stopping with a checkpoint after the current step", self.signal)
            elif _global_rank() == 0:
                logger.warning(
                    "Ctrl-C: stopping with a checkpoint once this step ends (its validation and save "
                    "included); Ctrl-C again stops at once without one"
                )

    def exit_now(self, what: str) -> NoReturn:
        """Ctrl-C: one line (from the launch's rank 0) and exit 130 now."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(RuntimeError):  # "reentrant call": the signal came inside its write
                stream.flush()
        if _global_rank() == 0:  # past Python's buffers, which the main thread may hold
            advice = resume_advice(self.trainer, "intact") if self.trainer is not None else ""
            os.write(2, f"dagrl: {what}{'; ' + advice if advice else ''}\n".encode())
        os._exit(INTERRUPTED)

    def agreed(self, store=None) -> str | None:
        """The signal any rank of this pool (or, through `store`, of the other pool) received, SIGINT over the
        others; every rank of the pool calls it at the same point."""
        import torch

        from dagrl.utils import dist

        name = self.signal
        if name is None and store is not None and store.check([STORE_KEY]):
            name = store.get(STORE_KEY).decode()
        flag = dist.global_max(torch.tensor([0.0 if name is None else 2.0 if name == "SIGINT" else 1.0]))
        if flag[0] == 0:
            return None
        self.stopped_on = "SIGINT" if flag[0] == 2 else name or "a stop signal on another rank"
        return self.stopped_on

    def announce(self, store) -> None:
        """Tell the other pool (its store) that this process got a stop signal."""
        if self.signal is not None and not store.check([STORE_KEY]):
            store.set(STORE_KEY, self.signal)

    def seconds_since(self) -> float:
        return time.monotonic() - self.at if self.signal is not None else 0.0

    def stopped_after(self, step: int, total: int, leader: bool) -> None:
        """A Ctrl-C stop after `step`, whose checkpoint is written: the line `outcome` gives (`leader`: this process
        reports)."""
        if leader:
            self.report = f"Ctrl-C: stopped after step {step} of {total}; {resume_advice(self.trainer, 'written')}"


def received() -> str | None:
    """The stop signal this process took (SIGTERM, SIGUSR1, SIGINT), or None."""
    return _installed.signal if _installed is not None else None


def outcome() -> tuple[int, str]:
    """(exit code, line) of this process's run once it returned: 130 and the report after Ctrl-C, else 0."""
    stop = _installed
    return (INTERRUPTED, stop.report) if stop is not None and "SIGINT" in (stop.signal, stop.stopped_on) else (0, "")


def resume_advice(trainer, state: str) -> str:
    """The newest complete checkpoint under trainer.default_local_dir (`state`: "written", "intact") and the command
    that resumes from it."""
    from dagrl.trainer.checkpoint import complete_checkpoints

    found = complete_checkpoints(Path(os.path.expanduser(trainer.default_local_dir)))
    if not found:
        return (
            "no checkpoint under trainer.default_local_dir yet: the same command resumes from "
            f"{trainer.resume_from_path} again"
            if trainer.resume_mode == "resume_path"
            else "no checkpoint yet: the same command starts the run afresh"
        )
    where = f"checkpoint {found[-1][1]} {state}"
    if trainer.resume_mode == "auto":
        return f"{where}: run the same command again to resume from it"
    args = [arg for arg in sys.argv[1:] if not arg.startswith(("trainer.resume_mode=", "trainer.resume_from_path="))]
    launcher = "torchrun <its options>" if "TORCHELASTIC_RUN_ID" in os.environ else "python3"
    return (
        f"{where}: resume from it with trainer.resume_mode=auto (the same command: "
        f"{launcher} -m dagrl.main_dag {shlex.join([*args, 'trainer.resume_mode=auto'])})"
    )
