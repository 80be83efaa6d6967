"""A scheduler's stop (SIGTERM, SIGUSR1) from the first line of the process: during start-up one line and exit 0 with
nothing written; during validation the validation stops between generations, so the checkpoint comes at once (within
the grace), and the relaunch validates those weights first and ends exactly as an uninterrupted run."""

from __future__ import annotations

import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dagrl.trainer.pools.schedule import Schedule
from tests.conftest import cpu_run_overrides
from tests.helpers import metrics_by_step, run_in_session, session_process
from tests.reliability.harness import complete_steps, partial_dirs
from tests.trainer.test_end_to_end import REWARD

ONE_THREAD = {"OMP_NUM_THREADS": "1"}
VAL = "val-core/dagrl/arithmetic/acc/mean@1"
COMMAND = [sys.executable, "-m", "dagrl.main_dag"]


def run_args(model, data, out: Path, **extra) -> list[str]:
    return cpu_run_overrides(
        model, data, out, **{"custom_reward_function.path": str(REWARD), "trainer.save_freq": 2, **extra}
    )


def dagrl_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("dagrl: ")]


@pytest.mark.parametrize("name", ["SIGTERM", "SIGUSR1"])
def test_a_stop_signal_during_start_up_stops_in_one_line_with_exit_0_and_nothing_written(
    tiny_model, tiny_data, tmp_path, name
):
    """Sent once the run has written its first line: it is composing, checking or building the trainer, long
    before the trainer's own handler (which waits for a step's end) is in place."""
    out, trace = tmp_path / "run", tmp_path / "trace"
    with session_process([*COMMAND, *run_args(tiny_model, tiny_data, out)], {"DAGRL_FAULT_TRACE": str(trace)}) as (
        proc,
        err,
    ):
        while proc.poll() is None and os.fstat(err.fileno()).st_size == 0:
            time.sleep(0.02)
        os.kill(proc.pid, signal.Signals[name])
        code = proc.wait(timeout=120)
        err.seek(0)
        stderr = err.read()
    assert not trace.exists(), "the signal came after start-up"
    assert code == 0 and "Traceback" not in stderr, stderr[-3000:]
    assert dagrl_lines(stderr) == [f"dagrl: {name} before the run started: stopped, nothing to save"], stderr
    assert stderr.splitlines()[-1] == dagrl_lines(stderr)[0]
    assert complete_steps(out) == [] and partial_dirs(out) == []
    assert not list(out.rglob("*.partial")), "a data-cache copy left half-written"


def test_sigterm_in_the_validation_before_the_first_step_stops_it_with_nothing_to_save(tiny_model, tiny_data, tmp_path):
    out = tmp_path / "run"
    args = run_args(tiny_model, tiny_data, out, **{"trainer.val_before_train": True})
    code, stderr = run_in_session([*COMMAND, *args], {**ONE_THREAD, "DAGRL_SIGNAL": "validation:0=SIGTERM"})
    assert code == 0 and "Traceback" not in stderr, stderr[-3000:]
    assert "validation (step 0) stopped by SIGTERM after 0 of" in stderr, stderr[-3000:]
    assert "stopped on SIGTERM before step 1: nothing to save" in stderr
    assert complete_steps(out) == [] and partial_dirs(out) == []


def test_a_resume_validates_a_start_step_whose_validation_a_stop_cut():
    """Saved with validated=false at a step the schedule validates: only a cut validation leaves that."""
    for val_before_train in (False, True):
        common = dict(total=6, trigger=1, test_freq=2, validates=True, val_before_train=val_before_train)
        assert Schedule(start=4, start_validated=False, **common).validated(4)
        assert not Schedule(start=4, start_validated=True, **common).validated(4)
        assert Schedule(start=3, start_validated=False, **common).validated(3) is val_before_train


@pytest.mark.slow
def test_sigterm_in_a_validation_checkpoints_at_once_and_the_relaunch_matches_an_uninterrupted_run(
    tiny_model, tiny_data, tmp_path
):
    """Step 1's validation is cut before its first generation and step 1 is saved (a checkpoint saved only by the
    stop); the same command resumes, validates step 1's weights first, and ends as the straight run. The fast
    tests above assert each part (the cut, the resume's validation) alone."""
    straight, out = tmp_path / "straight", tmp_path / "run"
    extra = {"trainer.test_freq": 1, "trainer.val_before_train": False}
    args = run_args(tiny_model, tiny_data, out, **extra)
    with ThreadPoolExecutor(1) as pool:
        baseline = pool.submit(
            run_in_session, [*COMMAND, *run_args(tiny_model, tiny_data, straight, **extra)], ONE_THREAD
        )
        code, stderr = run_in_session([*COMMAND, *args], {**ONE_THREAD, "DAGRL_SIGNAL": "validation:1=SIGTERM"})
        assert code == 0 and "Traceback" not in stderr, stderr[-3000:]
        assert "validation (step 1) stopped by SIGTERM after 0 of" in stderr, stderr[-3000:]
        assert "stopped on SIGTERM after step 1 of 2: checkpoint global_step_1 written" in stderr
        assert "NOT within it" not in stderr
        assert complete_steps(out) == [1] and VAL not in metrics_by_step(out)[1]
        code, stderr = run_in_session([*COMMAND, *args], ONE_THREAD)
        assert code == 0, stderr[-3000:]
        assert f"resumed from {out / 'global_step_1'} (step 1)" in stderr
        code, stderr = baseline.result()
    assert code == 0, stderr[-3000:]
    assert complete_steps(out) == [1, 2] and partial_dirs(out) == []
    assert VAL in metrics_by_step(out)[1]
    assert metrics_by_step(out) == metrics_by_step(straight)
