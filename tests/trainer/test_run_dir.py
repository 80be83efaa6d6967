"""The run directory is the run's: one launch at a time (the lock, and a killed run's lock taken over), no rows it
cannot account for cut, an absolute path fixed at start, and pruning that never follows a symbolic link. Where the
directory may be, and the rows and sweeps refused, are the corpus's (tests/reliability/corpus/run_directory.py)."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dagrl.config.errors import ConfigError
from dagrl.trainer import run_dir
from dagrl.trainer.checkpoint import MARKER, PARTIAL_MARKER, CheckpointManager
from tests.conftest import cpu_run_overrides
from tests.helpers import run_in_session

HOST = socket.gethostname()


@pytest.fixture
def held(tmp_path):
    """The run directory {tmp}/run, locked by this process for the test."""
    root = str(tmp_path / "run")
    run_dir.take(root)
    yield root
    run_dir.release(root)


def test_a_second_launch_into_a_locked_directory_is_refused_in_one_line_naming_the_owner(held, tiny_model, tiny_data):
    before = (Path(held) / run_dir.LOCK_FILE).read_text()
    code, stderr = run_in_session(
        [sys.executable, "-m", "dagrl.main_dag", *cpu_run_overrides(tiny_model, tiny_data, held)]
    )
    errors = [line for line in stderr.splitlines() if line.startswith("dagrl: error:")]
    assert code == 2 and "Traceback" not in stderr, stderr[-3000:]
    assert len(errors) == 1 and f"in use by another dagrl run, pid {os.getpid()} on {HOST}" in errors[0]
    assert "choose another trainer.default_local_dir" in errors[0]
    assert (Path(held) / run_dir.LOCK_FILE).read_text() == before  # the owner's record untouched
    assert sorted(p.name for p in Path(held).iterdir()) == [run_dir.LOCK_FILE]  # nothing else written


def test_the_lock_records_its_owner_and_a_run_that_ends_empties_it(tmp_path):
    root = str(tmp_path / "run")
    run_dir.take(root)
    record = run_dir.owner(root)
    assert record["pid"] == os.getpid() and record["host"] == HOST and record["started"]
    run_dir.release(root)
    assert run_dir.owner(root) is None and (Path(root) / run_dir.LOCK_FILE).read_text() == ""


def test_the_lock_of_a_killed_run_is_taken_over_and_said_so(tmp_path, caplog):
    root = str(tmp_path / "run")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from dagrl.trainer import run_dir; run_dir.take({root!r}); print(1, flush=True); "
            "import time; time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "1"
        with pytest.raises(ConfigError, match=f"in use by another dagrl run, pid {holder.pid} on {HOST}"):
            run_dir.take(root)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with caplog.at_level(logging.WARNING, logger="dagrl.trainer.run_dir"):
        run_dir.take(root)
    try:
        [said] = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
        assert f"took over the lock of pid {holder.pid} on {HOST}" in said and "no longer running" in said
        assert run_dir.owner(root)["pid"] == os.getpid()
    finally:
        run_dir.release(root)


def rows(path: Path, count: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"step": step, "x": 1.0}) + "\n" for step in range(count)))


def test_rows_of_a_killed_run_may_run_again_rows_of_an_ended_one_are_refused(tmp_path, tiny_model, tiny_data):
    """A killed run leaves its lock record: its rows are dagrl's and its steps run again. Without that record
    (a run that ended, another tool) the same rows stop pre-flight."""
    from dagrl.config.load import compose
    from dagrl.config.preflight.trainer import check_earlier_rows
    from dagrl.config.tree import Cfg

    root = tmp_path / "run"
    cfg = Cfg(compose(cpu_run_overrides(tiny_model, tiny_data, root)))
    rows(root / "metrics.jsonl", 3)
    with pytest.raises(ConfigError, match=r"holds metrics.jsonl \(3 rows\) but no checkpoint"):
        check_earlier_rows(cfg)
    (root / run_dir.LOCK_FILE).write_text(json.dumps({"pid": 1 << 22, "host": HOST, "started": "then"}))
    check_earlier_rows(cfg)
    (root / run_dir.LOCK_FILE).write_text("")  # the record a run that ended leaves
    with pytest.raises(ConfigError, match="move them away"):
        check_earlier_rows(cfg)
    off = Cfg(compose(cpu_run_overrides(tiny_model, tiny_data, root, **{"trainer.logger": "[console]"})))
    check_earlier_rows(off)  # no jsonl logger: metrics.jsonl is not this run's to touch


def test_the_run_directory_is_made_absolute_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg_data = {"trainer": {"default_local_dir": "runs/a"}}
    run_dir.resolve(cfg_data)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # a scorer's os.chdir after start
    assert cfg_data["trainer"]["default_local_dir"] == str(tmp_path / "runs" / "a")
    empty = {"trainer": {"default_local_dir": ""}}
    run_dir.resolve(empty)  # pre-flight's to refuse, as written
    assert empty["trainer"]["default_local_dir"] == ""


@pytest.mark.parametrize(
    "overrides",
    [
        ["trainer.default_local_dir=/r/${hydra:job.num}", "actor_rollout_ref.actor.optim.lr=1e-6,1e-5"],
        ["trainer.experiment_name=a,b"],  # the default directory names the experiment
        ["trainer.default_local_dir=/r/a,/r/b", "actor_rollout_ref.actor.optim.lr=1e-6,1e-5"],
        ["actor_rollout_ref.actor.optim.lr=1e-6"],  # one job
    ],
)
def test_a_sweep_whose_jobs_get_directories_of_their_own_passes(overrides):
    run_dir.check_multirun(overrides, run_dir.conf_default())


def checkpoint(path: Path, step: int) -> None:
    (path / "actor").mkdir(parents=True)
    (path / "actor" / "weights").write_bytes(b"w" * 64)
    (path / MARKER).write_text(json.dumps({"global_step": step}))


def test_pruning_leaves_a_symlinked_checkpoint_and_its_target_alone(tmp_path, caplog):
    root, elsewhere = tmp_path / "run", tmp_path / "elsewhere" / "global_step_1"
    checkpoint(elsewhere, 1)
    root.mkdir()
    (root / "global_step_1").symlink_to(elsewhere)
    manager = CheckpointManager(str(root), keep=1, rank=0, barrier=lambda: None)
    with caplog.at_level(logging.INFO, logger="dagrl.trainer.checkpoint"):
        for step in (2, 3):  # the run goes on past each save
            manager.save(step, lambda directory: (directory / "actor").mkdir())
    assert (root / "global_step_1").is_symlink() and os.readlink(root / "global_step_1") == str(elsewhere)
    assert (elsewhere / "actor" / "weights").read_bytes() == b"w" * 64 and (elsewhere / MARKER).is_file()
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("global_step")) == [
        "global_step_1",
        "global_step_3",
    ]
    said = [r.getMessage() for r in caplog.records if "not removing" in r.getMessage()]
    assert said == [f"not removing {root / 'global_step_1'}: a symbolic link (to {elsewhere}), left as it is"]


def test_a_symlinked_partial_save_is_not_removed_through_the_link(tmp_path):
    root, target = tmp_path / "run", tmp_path / "kept"
    target.mkdir()
    (target / PARTIAL_MARKER).touch()
    (target / "notes").write_text("mine")
    root.mkdir()
    (root / ".tmp_global_step_5").symlink_to(target)
    CheckpointManager(str(root), keep=1, rank=0, barrier=lambda: None).clear_partial()
    assert (root / ".tmp_global_step_5").is_symlink() and (target / "notes").read_text() == "mine"


SCORER = """import os


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    os.chdir(os.environ["WANDER_TO"])  # a scorer that changes the process's directory
    with open("wandered", "w") as mark:
        mark.write(str(os.getpid()))
    return 0.0
"""


def test_a_scorer_that_changes_directory_does_not_move_the_checkpoints(tmp_path, tiny_model, tiny_data):
    (tmp_path / "scorer.py").write_text(SCORER)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    extra = {
        "custom_reward_function.path": str(tmp_path / "scorer.py"),
        "trainer.total_training_steps": 1,
        "trainer.save_freq": 1,
        "trainer.val_before_train": False,
        "data.val_files": "null",
    }
    command = [sys.executable, "-m", "dagrl.main_dag", *cpu_run_overrides(tiny_model, tiny_data, Path("run"), **extra)]
    proc = subprocess.Popen(
        command, cwd=tmp_path, env={**os.environ, "WANDER_TO": str(elsewhere)}, stderr=subprocess.PIPE, text=True
    )
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    assert (elsewhere / "wandered").read_text() == str(proc.pid)  # the run's own process changed directory
    assert (tmp_path / "run" / "global_step_1" / MARKER).is_file() and not (elsewhere / "run").exists()
    assert (tmp_path / "run" / run_dir.LOCK_FILE).read_text() == ""  # the run ended: its lock record emptied


def test_a_ray_driver_finds_the_directory_in_use_without_taking_the_lock(tmp_path):
    root = str(tmp_path / "run")
    run_dir.check_free(root)  # nothing there yet: free, and nothing created
    assert not Path(root).exists()
    run_dir.take(root)
    try:
        with pytest.raises(ConfigError, match=f"in use by another dagrl run, pid {os.getpid()} on {HOST}"):
            run_dir.check_free(root)
    finally:
        run_dir.release(root)
    run_dir.check_free(root)
    assert run_dir.owner(root) is None  # the probe wrote no record


def test_a_run_stopped_by_a_signal_leaves_its_record_for_the_relaunch(tmp_path, caplog):
    """Stopped before its first checkpoint (a SIGTERM after the first validation), a run's rows are its relaunch's to
    replace: its record stays, marked, and the relaunch says whose run it continues."""
    root = str(tmp_path / "run")
    run_dir.take(root)
    run_dir.release(root, stopped="SIGTERM")
    record = run_dir.owner(root)
    assert record["pid"] == os.getpid() and record["stopped"] == "SIGTERM"
    with caplog.at_level(logging.INFO, logger="dagrl.trainer.run_dir"):
        run_dir.take(root)
    run_dir.release(root)
    [said] = [r.getMessage() for r in caplog.records if "relaunched after" in r.getMessage()]
    assert said.endswith(f"pid {os.getpid()} on {HOST} (started {record['started']}), which stopped on SIGTERM")
    assert run_dir.owner(root) is None
