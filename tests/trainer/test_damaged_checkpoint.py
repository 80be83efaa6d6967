"""Damaged checkpoints and a full disk: a checkpoint's marker records its files and sizes at save, pre-flight names a
damaged newest checkpoint with the previous complete one and the keys that resume from it (the damaged one kept,
renamed), and a save that cannot fit, or whose disk fills while it writes, stops in one line naming the directory
and the space, the newest complete checkpoint untouched and the cut save left for the next launch to name."""

from __future__ import annotations

import errno
import json
import logging
import sys
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from dagrl.config.errors import ConfigError, RunError
from dagrl.config.load import compose
from dagrl.config.preflight.checkpoints import check_checkpoint_dir, check_markers
from dagrl.config.tree import Cfg
from dagrl.trainer import checkpoint_space
from dagrl.trainer.checkpoint import (
    MARKER,
    CheckpointManager,
    complete_checkpoints,
    damage,
    foreign_entries,
    partial_saves,
)
from tests.conftest import cpu_run_overrides
from tests.helpers import run_in_session

SHARD = "actor/__0_0.distcp"


def manager(root: Path, keep: int | None = None) -> CheckpointManager:
    return CheckpointManager(str(root), keep, rank=0, barrier=lambda: None)


def write_parts(directory: Path) -> None:
    """What a trainer's save writes, in miniature: an actor shard and data.pt."""
    (directory / "actor").mkdir()
    (directory / SHARD).write_bytes(bytes(range(256)) * 16)
    torch.save({"global_step": int(directory.name.rsplit("_", 1)[1])}, directory / "data.pt")


def saved(root: Path, *steps: int) -> CheckpointManager:
    checkpoints = manager(root)
    for step in steps:
        checkpoints.save(step, write_parts)
    return checkpoints


def truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as file:
        file.truncate(size)


def test_the_marker_records_every_file_of_the_checkpoint_with_its_size(tmp_path):
    saved(tmp_path, 1)
    path = tmp_path / "global_step_1"
    marker = json.loads((path / MARKER).read_text())
    assert marker["global_step"] == 1
    assert marker["files"] == {"actor/__0_0.distcp": 4096, "data.pt": (path / "data.pt").stat().st_size}
    assert damage(path) is None


@pytest.mark.parametrize(
    "harm, words",
    [
        (lambda p: truncate(p / SHARD, 1000), f"{SHARD} is 1000 bytes, 4096 when saved (truncated)"),
        (lambda p: (p / SHARD).unlink(), f"{SHARD} is missing (written at save, 4096 bytes)"),
        (lambda p: truncate(p / "data.pt", 10), "data.pt is 10 bytes"),
        (lambda p: (p / "data.pt").unlink(), "it has no data.pt"),
    ],
    ids=["shard truncated", "shard missing", "data.pt truncated", "data.pt missing"],
)
def test_preflight_names_the_damaged_newest_checkpoint_and_the_previous_complete_one(tmp_path, harm, words):
    saved(tmp_path, 1, 2)
    harm(tmp_path / "global_step_2")
    with pytest.raises(ConfigError) as error:
        check_markers(tmp_path, None)
    line = str(error.value)
    assert "\n" not in line and error.value.key == "trainer.default_local_dir"
    assert f"checkpoint {tmp_path / 'global_step_2'} in trainer.default_local_dir is damaged: {words}" in line
    assert (
        f"trainer.resume_mode=resume_path trainer.resume_from_path={tmp_path / 'global_step_1'}" in line
        and "renamed global_step_2.damaged" in line
    ), line
    check_markers(tmp_path, tmp_path / "global_step_1")  # resuming from the previous one: accepted


def test_a_damaged_only_checkpoint_has_no_earlier_one_to_offer(tmp_path):
    saved(tmp_path, 1)
    truncate(tmp_path / "global_step_1" / SHARD, 0)
    with pytest.raises(ConfigError, match="there is no earlier complete checkpoint: restore it, or move it out"):
        check_markers(tmp_path, None)


def test_a_damaged_older_checkpoint_under_an_intact_newest_is_moved_out_by_hand(tmp_path):
    """Pruning would delete it: dagrl never does, so the user moves it (as for every damaged checkpoint before)."""
    saved(tmp_path, 1, 2)
    truncate(tmp_path / "global_step_1" / SHARD, 0)
    with pytest.raises(ConfigError, match="global_step_1 in trainer.default_local_dir is damaged.*move it out"):
        check_markers(tmp_path, None)


def test_resume_path_to_the_previous_one_passes_preflight_and_sets_the_damaged_one_aside(
    tmp_path, tiny_model, tiny_data
):
    root = tmp_path / "ckpt"
    checkpoints = saved(root, 1, 2, 3)
    truncate(root / "global_step_3" / SHARD, 100)
    damaged = root / "global_step_3"
    before = sorted((p.relative_to(damaged), p.stat().st_size) for p in damaged.rglob("*"))
    start = root / "global_step_2"
    overrides = cpu_run_overrides(tiny_model, tiny_data, root)
    with pytest.raises(ConfigError, match=f"trainer.resume_from_path={start}"):
        check_checkpoint_dir(Cfg(compose(overrides)))  # auto: refused, naming the way on
    resume = ["trainer.resume_mode=resume_path", f"trainer.resume_from_path={start}"]
    check_checkpoint_dir(Cfg(compose([*overrides, *resume])))  # global_step_3 is damaged: not "newer"
    checkpoints.set_aside_damaged(start)
    aside = root / "global_step_3.damaged"
    assert sorted((p.relative_to(aside), p.stat().st_size) for p in aside.rglob("*")) == before  # only renamed
    assert [step for step, _ in complete_checkpoints(root)] == [1, 2] and foreign_entries(root) == []
    assert checkpoints.save(3, write_parts) == root / "global_step_3"  # the step's name is free again


def test_a_checkpoint_without_recorded_sizes_is_checked_as_before(tmp_path):
    """A checkpoint of an older dagrl: its marker holds the step alone."""
    saved(tmp_path, 1)
    (tmp_path / "global_step_1" / MARKER).write_text(json.dumps({"global_step": 1}))
    truncate(tmp_path / "global_step_1" / SHARD, 10)
    assert damage(tmp_path / "global_step_1") is None


Usage = namedtuple("Usage", "total used free")


def test_a_save_that_cannot_fit_stops_before_writing_anything(tmp_path, monkeypatch):
    checkpoints = saved(tmp_path, 1)
    size = sum(p.stat().st_size for p in (tmp_path / "global_step_1").rglob("*") if p.name != MARKER)
    monkeypatch.setattr(checkpoint_space.shutil, "disk_usage", lambda path: Usage(10**9, 10**9, 1000))
    with pytest.raises(RunError) as error:
        checkpoints.save(2, write_parts)
    line = str(error.value)
    assert f"not enough disk space to save the checkpoint of step 2 in {tmp_path}" in line
    assert f"{size / 2**20:.1f} MiB needed (the size of global_step_1)" in line
    assert f"the newest complete checkpoint {tmp_path / 'global_step_1'} is kept" in line
    assert [step for step, _ in complete_checkpoints(tmp_path)] == [1] and partial_saves(tmp_path) == []


def full_disk_writer(error: BaseException):
    def write(directory: Path) -> None:
        (directory / "actor").mkdir()
        (directory / SHARD).write_bytes(b"x" * 100)  # part of it landed
        raise error

    return write


@pytest.mark.parametrize(
    "error",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 704 vs 598"),
        Exception("a checkpoint writer process failed: [Errno 28] No space left on device"),
    ],
    ids=["ENOSPC", "torch's zip writer", "a writer process's words"],
)
def test_a_disk_that_fills_during_the_save_stops_in_one_line_keeping_the_last_checkpoint(tmp_path, error, caplog):
    checkpoints = saved(tmp_path, 1)
    before = (tmp_path / "global_step_1" / SHARD).read_bytes()
    with pytest.raises(RunError) as stopped:
        checkpoints.save(2, full_disk_writer(error))
    line = str(stopped.value)
    assert "\n" not in line and stopped.value.__cause__ is error
    assert f"the disk filled while saving the checkpoint of step 2 in {tmp_path}" in line
    assert "0.0 MiB written of about 0.0 MiB needed" in line
    assert f"the newest complete checkpoint {tmp_path / 'global_step_1'} is kept" in line
    assert "the partial save .tmp_global_step_2 is left for the next launch to remove" in line
    assert [step for step, _ in complete_checkpoints(tmp_path)] == [1]
    assert (tmp_path / "global_step_1" / SHARD).read_bytes() == before
    assert [p.name for p in partial_saves(tmp_path)] == [".tmp_global_step_2"]
    with caplog.at_level(logging.WARNING):
        manager(tmp_path).clear_partial()  # the next launch names it
    assert f"removing partial checkpoint {tmp_path / '.tmp_global_step_2'}" in caplog.text


def test_other_errors_of_a_save_are_not_taken_for_a_full_disk(tmp_path):
    checkpoints = saved(tmp_path, 1)
    with pytest.raises(OSError) as error:
        checkpoints.save(2, full_disk_writer(OSError(errno.EACCES, "Permission denied")))
    assert error.value.errno == errno.EACCES


@pytest.mark.slow
def test_a_real_run_resumes_from_the_checkpoint_before_a_damaged_one(tmp_path, tiny_model, tiny_data):
    """The fast tests above with a real run: a truncated Megatron shard of the newest checkpoint is refused in
    pre-flight (no model built), and the keys the line names resume from the one before, to the end."""
    out = tmp_path / "ckpt"
    base = cpu_run_overrides(tiny_model, tiny_data, out, **{"trainer.save_freq": 1, "trainer.val_before_train": False})
    command = [sys.executable, "-m", "dagrl.main_dag"]
    code, stderr = run_in_session([*command, *base])
    assert code == 0, stderr[-3000:]
    shard = max((out / "global_step_2" / "actor").glob("*.distcp"), key=lambda p: p.stat().st_size)
    size = shard.stat().st_size
    truncate(shard, size // 2)
    longer = [*base, "trainer.total_training_steps=3"]
    code, stderr = run_in_session([*command, *longer])
    errors = [line for line in stderr.splitlines() if line.startswith("dagrl: error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert (
        f"global_step_2 in trainer.default_local_dir is damaged: actor/{shard.name} is {size // 2} bytes" in errors[0]
    )
    start = out / "global_step_1"
    code, stderr = run_in_session(
        [*command, *longer, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={start}"]
    )
    assert code == 0, stderr[-3000:]
    assert f"resumed from {start} (step 1)" in stderr
    assert (out / "global_step_2.damaged" / "actor" / shard.name).stat().st_size == size // 2  # kept as it was
    assert [step for step, _ in complete_checkpoints(out)] == [1, 2, 3]
    assert (out / "global_step_2.damaged" / MARKER).is_file()
