"""The prompt ledger: `<trainer.default_local_dir>/prompt_ledger.jsonl`, one line for every prompt the trainer drew.

A prompt's uid is "<epoch>:<dataset index>" (the sampler visits each row once per epoch). Its line is one of
    {"uid": u, "fate": "trained@<step>"}
    {"uid": u, "fate": "filtered:<reason>", "step": s}  dropped by a node (dynamic sampling: zero_variance, surplus)
    {"uid": u, "fate": "in_flight", "step": s}          still in a partial-rollout buffer when the run ended

Rank 0 appends a step's lines after the step's graph ran (flushed and fsynced). Every checkpoint records the
ledger's length, and a resumed run truncates the ledger to it before replaying the steps after the checkpoint,
which rewrite their lines: after kill -9 anywhere and a relaunch, each uid drawn up to the last trained step has
exactly one line. The in_flight lines are written after the last step's checkpoint, so extending a finished run
drops them (its next steps decide those prompts' fates). A fresh start cuts only a ledger that is empty or a killed
run's: pre-flight refuses lines no checkpoint accounts for (config/preflight/trainer.py::check_earlier_rows).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Iterable

logger = logging.getLogger(__name__)

LEDGER_FILE = "prompt_ledger.jsonl"
UNEXPLAINED = "dropped"  # the reason of a prompt that left the step untrained without a node naming why


def uid_order(uid: str) -> list[tuple[int, int | str]]:
    """Sort key: numeric parts numerically ("0:10" after "0:9")."""
    return [(0, int(part)) if part.isdigit() else (1, part) for part in str(uid).split(":")]


def step_records(
    step: int, trained: Iterable[str], seen: Iterable[str], in_flight: Iterable[str], reasons: dict[str, str]
) -> list[dict]:
    """A step's lines: the prompts trained on, then those seen this step (drawn, or carried in from the last one)
    that were neither trained on nor are still in flight, with the reason a node recorded."""
    trained, carried = set(trained), set(in_flight)
    lines: list[dict] = [{"uid": uid, "fate": f"trained@{step}"} for uid in sorted(trained, key=uid_order)]
    dropped = set(seen) - trained - carried
    lines += [
        {"uid": uid, "fate": f"filtered:{reasons.get(uid, UNEXPLAINED)}", "step": step}
        for uid in sorted(dropped, key=uid_order)
    ]
    return lines


def in_flight_records(step: int, in_flight: Iterable[str]) -> list[dict]:
    return [{"uid": uid, "fate": "in_flight", "step": step} for uid in sorted(set(in_flight), key=uid_order)]


class PromptLedger:
    """An append-only JSONL file whose length (bytes, lines) goes into every checkpoint (see the module docstring)."""

    def __init__(self, path: str | Path, saved: dict | None = None, source: str | Path | None = None) -> None:
        """Opens the ledger at the length `saved` recorded (None: empty, a fresh run), truncating what later steps
        or an end-of-run wrote. `source`: the ledger beside the checkpoint resumed from; when that is another file
        (trainer.resume_from_path in another directory) the ledger starts as its first `saved` bytes."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.bytes = int(saved["bytes"]) if saved else 0
        self.lines = int(saved["lines"]) if saved else 0
        source = Path(source) if source is not None else None
        if source is not None and source.is_file() and not _same_file(source, self.path):
            with open(source, "rb") as src, open(self.path, "wb") as out:
                out.write(src.read(self.bytes))
        elif not self.path.exists():
            self.path.touch()
        size = self.path.stat().st_size
        if size > self.bytes:
            os.truncate(self.path, self.bytes)
        elif size < self.bytes:
            logger.warning(
                "%s has %d bytes, the checkpoint recorded %d: lines of earlier steps are missing; "
                "continuing after them",
                self.path,
                size,
                self.bytes,
            )
            self.bytes, self.lines = size, _count_lines(self.path)
        self._file = open(self.path, "ab")
        _fsync(self._file)

    def state(self) -> dict[str, int]:
        """What a checkpoint records: the length after the last complete step's lines."""
        return {"bytes": self.bytes, "lines": self.lines}

    def append(self, records: list[dict]) -> None:
        """Writes `records` as lines, flushed and fsynced (a kill leaves at most a torn tail, which resume cuts)."""
        if not records:
            return
        data = "".join(json.dumps(record) + "\n" for record in records).encode()
        self._file.write(data)
        _fsync(self._file)
        self.bytes += len(data)
        self.lines += len(records)

    def close(self) -> None:
        self._file.close()


def _fsync(file) -> None:
    file.flush()
    os.fsync(file.fileno())


def _same_file(a: Path, b: Path) -> bool:
    return b.exists() and os.path.samefile(a, b)


def _count_lines(path: Path) -> int:
    with open(path, "rb") as lines:
        return sum(1 for _ in lines)
