"""Disk space for a checkpoint save: checked before the write against the newest checkpoint's size (the next one is
the same size: the same model, optimizer and layout), and a disk that fills during the write (ENOSPC, or the
"unexpected pos" that torch's zip writer raises when a write came up short) named as such. Either stops the run in
one line naming the directory and the space needed; the newest complete checkpoint is untouched, and a save cut
short is left as its `.tmp_global_step_N`, which the next launch names as it removes it.

Every rank checks its own file system, and only some ranks write some files (rank 0: data.pt, the marker), so a full
disk can stop one rank alone. Each part of a save therefore ends with every rank's outcome shared (`together`): where
one rank failed, all stop at once with its line, instead of the others waiting in the save's next collective until
the hang watchdog."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Callable

from dagrl.config.errors import RunError


_FULL_TEXTS = (os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT))


def gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB" if size >= 2**26 else f"{size / 2**20:.1f} MiB"


def _kept(latest: Path | None) -> str:
    return f"the newest complete checkpoint {latest} is kept" if latest is not None else "no checkpoint was written"


def check_free_space(root: Path, step: int, needed: int, latest: Path | None) -> None:
    """RunError, before anything is written, when `root`'s file system has less free space than `needed` bytes."""
    free = shutil.disk_usage(root).free
    if free < needed:
        raise RunError(
            f"not enough disk space to save the checkpoint of step {step} in {root}: {gib(free)} free, "
            f"{gib(needed)} needed (the size of {latest.name if latest else 'the last checkpoint'}); "
            f"{_kept(latest)}: free {gib(needed - free)} there (a new checkpoint is written before old ones are "
            f"pruned) and relaunch to resume"
        )


def is_disk_full(error: BaseException) -> bool:
    """ENOSPC (or EDQUOT, a quota) anywhere in the error's chain, or torch's zip writer's short write."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(error, RuntimeError) and "unexpected pos" in str(error):
            return True
        if any(text in str(error) for text in _FULL_TEXTS):  # raised again in megatron's writer processes' words
            return True
        error = error.__cause__ or error.__context__
    return False


def disk_full_error(
    error: BaseException, tmp: Path, step: int, latest: Path | None, needed: int | None
) -> RunError | None:
    """The one-line stop for a save that ran out of space while writing into `tmp` (None: `error` is another);
    `needed`: the newest checkpoint's size, where there is one."""
    if not is_disk_full(error):
        return None
    usage = shutil.disk_usage(tmp.parent)
    written = sum(path.stat().st_size for path in tmp.rglob("*") if path.is_file() and not path.is_symlink())
    return RunError(
        f"the disk filled while saving the checkpoint of step {step} in {tmp.parent} ({gib(usage.free)} free, "
        f"{gib(written)} written of {'about ' + gib(needed) if needed else 'more'} needed); "
        f"{_kept(latest)}, the partial save {tmp.name} is left for the next launch to remove: free space there "
        f"and relaunch to resume"
    )


def together(act: Callable[[], object], gather: Callable[[object], list]) -> None:
    """Run `act` (a part of a save) on this rank, then share every rank's outcome through `gather` (every rank's
    object, in rank order; a collective): this rank's own error is raised as it is (the one-line RunError of a full
    disk, another error with its traceback); where only peers failed, a RunError with the first one's line (a
    RunError's own line, so that every rank says the same)."""
    error = None
    try:
        act()
    except Exception as caught:  # noqa: BLE001 - raised again below, once the peers know
        error = caught
    first = (str(error).splitlines() or [""])[0]
    verdicts = gather(None if error is None else (isinstance(error, RunError), first, type(error).__name__))
    if error is not None:
        raise error
    failed = [(rank, verdict) for rank, verdict in enumerate(verdicts) if verdict is not None]
    if failed:
        rank, (is_run_error, line, kind) = failed[0]
        raise RunError(
            line
            if is_run_error
            else f"rank {rank} failed while saving a checkpoint ({kind}: {line}; its traceback is in that rank's log): "
            f"the newest complete checkpoint is kept; fix the cause and relaunch to resume"
        )
