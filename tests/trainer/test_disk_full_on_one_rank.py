"""One rank's disk full, the other's not: two gloo processes save a checkpoint where only one rank's space check (or
write) fails. Every rank stops within seconds with the same one line, the newest complete checkpoint kept; none
waits in the save's next collective for the process group's timeout."""

from __future__ import annotations

import errno
import json
import os
import time
from collections import namedtuple
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from tests.engine.engine_helpers import free_port

GROUP_TIMEOUT_S = 30.0  # a rank left waiting in a collective fails after this, not with the line
Usage = namedtuple("Usage", "total used free")


def _write(rank: int, full: bool):
    def write(directory: Path) -> None:
        """Each rank its shard, rank 0 data.pt too; the full rank's write fails part-way."""
        (directory / "actor").mkdir(exist_ok=True)
        (directory / "actor" / f"__{rank}_0.distcp").write_bytes(bytes(range(256)) * 16)
        if full:
            raise OSError(errno.ENOSPC, "No space left on device")
        if rank == 0:
            torch.save({"global_step": 2}, directory / "data.pt")

    return write


def _rank(rank: int, port: int, root: str, full_rank: int, phase: str, out: str) -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1"})
    os.environ["MASTER_PORT"] = str(port)
    from dagrl.config.errors import RunError
    from dagrl.trainer import checkpoint_space
    from dagrl.trainer.checkpoint import CheckpointManager
    from dagrl.utils import dist

    dist.init_process_group(timeout_s=GROUP_TIMEOUT_S)
    try:
        checkpoints = CheckpointManager(root, None, rank, dist.barrier)
        checkpoints.save(1, _write(rank, full=False))
        full = rank == full_rank
        if full and phase == "space":
            checkpoint_space.shutil.disk_usage = lambda path: Usage(10**9, 10**9, 1000)
        started, line = time.monotonic(), None
        try:
            checkpoints.save(2, _write(rank, full=full and phase == "write"))
        except RunError as error:
            line = str(error)
        result = {"line": line, "seconds": time.monotonic() - started}
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    finally:  # a process exiting with its gloo group alive can abort
        torch.distributed.destroy_process_group()


@pytest.mark.parametrize(
    "phase,full_rank,words",
    [
        ("space", 1, "not enough disk space to save the checkpoint of step 2"),
        ("write", 1, "the disk filled while saving the checkpoint of step 2"),
        ("write", 0, "the disk filled while saving the checkpoint of step 2"),
    ],
    ids=["rank 1's space check", "rank 1's write", "rank 0's write"],
)
def test_one_full_rank_stops_every_rank_at_once_with_its_line(tmp_path, phase, full_rank, words):
    from dagrl.trainer.checkpoint import complete_checkpoints, partial_saves

    root, out = tmp_path / "ckpt", tmp_path / "out"
    out.mkdir()
    mp.spawn(_rank, args=(free_port(), str(root), full_rank, phase, str(out)), nprocs=2)
    results = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(2)]
    lines = [result["line"] for result in results]
    assert lines[0] is not None and lines[0] == lines[1] and "\n" not in lines[0], lines
    assert words in lines[0] and f"the newest complete checkpoint {root / 'global_step_1'} is kept" in lines[0]
    assert max(result["seconds"] for result in results) < 10, results  # not the group's timeout
    assert [step for step, _ in complete_checkpoints(root)] == [1]
    assert [path.name for path in partial_saves(root)] == ([] if phase == "space" else [".tmp_global_step_2"])
