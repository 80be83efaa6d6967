"""Helper processes that die with the trainer.

A trainer killed with SIGKILL runs no cleanup code, so a process it forked must notice by itself: `children_die_with_us`
makes every process forked by the calling thread inside the block ask the kernel (Linux PR_SET_PDEATHSIG) for a SIGKILL
when its parent goes. Used around checkpoint writes, whose writer processes (megatron's FileSystemWriterAsync forks
one per file) otherwise hang forever in a queue read once the trainer is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
from typing import Iterator

PR_SET_PDEATHSIG = 1
try:  # looked up before any fork: the child's handler must not load libraries
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux: no-op
    _prctl = None

_guard: tuple[int, int] | None = None  # (pid, thread id) of a thread inside children_die_with_us
_registered = False


def die_with_parent(parent_pid: int) -> None:
    """In a child: SIGKILL this process when `parent_pid` (its parent) dies, or now if it already has."""
    if _prctl is None:
        return
    _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the prctl: no signal will come
        os.kill(os.getpid(), signal.SIGKILL)


def _after_fork_in_child() -> None:
    global _guard
    guard, _guard = _guard, None  # the child's own children are not covered (their parent is not guard[0])
    # Only forks of the guarded thread: PDEATHSIG fires when the forking *thread* exits, and this one outlives the
    # block (megatron joins its writers before returning).
    if guard is not None and guard[1] == threading.get_ident():
        die_with_parent(guard[0])


@contextlib.contextmanager
def children_die_with_us() -> Iterator[None]:
    """Processes forked by this thread inside the block are killed when this process dies (SIGKILL included)."""
    global _guard, _registered
    if not _registered:
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _registered = True
    previous, _guard = _guard, (os.getpid(), threading.get_ident())
    try:
        yield
    finally:
        _guard = previous
