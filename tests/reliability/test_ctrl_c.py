"""Ctrl-C keeps the work: real SIGINTs to a seeded CPU run in each phase (start-up, the validation before the first
step, a step, a later validation, a second Ctrl-C during the checkpoint the first one causes), each launch the same
command again; the run ends with exactly the metrics and weights of an uninterrupted one. Under torchrun the
launcher passes the terminal's Ctrl-C on to every worker (colocated and with separate pools)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import cpu_run_overrides
from tests.helpers import metrics_by_step, run_in_session, session_process
from tests.reliability.harness import (
    checkpoint_state,
    complete_steps,
    differences,
    launch,
    partial_dirs,
    wait_for_point,
)
from tests.reliability.test_self_healing import torchrun
from tests.trainer.test_end_to_end import REWARD

ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # the uninterrupted run goes beside the chain: two cores, each run alike
TOTAL = 6
AGAIN = "run the same command again to resume from it"
VAL = "val-core/dagrl/arithmetic/acc/mean@1"


def run_args(model, data, out: Path, **extra) -> list[str]:
    """Validation before the first step and after every second one; a checkpoint only after the last step, so that
    every other checkpoint is one a Ctrl-C wrote."""
    return cpu_run_overrides(
        model,
        data,
        out,
        **{
            "custom_reward_function.path": str(REWARD),
            "trainer.total_training_steps": TOTAL,
            "trainer.save_freq": TOTAL,
            "trainer.test_freq": 2,
            "trainer.val_before_train": True,
            **extra,
        },
    )


def dagrl_lines(stderr: str) -> list[str]:
    """The lines dagrl writes for the user (its log lines start with a time)."""
    return [line for line in stderr.splitlines() if line.startswith("dagrl: ")]


def ctrl_c_in_start_up(args: list[str], trace: Path) -> tuple[int, str]:
    """SIGINT as soon as the run has written its first line (it is then building the trainer): (code, stderr)."""
    command = [sys.executable, "-m", "dagrl.main_dag", *args]
    with session_process(command, {**ONE_THREAD, "DAGRL_FAULT_TRACE": str(trace)}) as (proc, err):
        while proc.poll() is None and os.fstat(err.fileno()).st_size == 0:  # fstat: the shared offset stays put
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=120)
        err.seek(0)
        return code, err.read()


def expected_line(kind: str, out: Path) -> str:
    """What the launch prints last: "stopped N" (a checkpoint of step N written), "second" (a second Ctrl-C) or
    "idle" (no step under way), naming the newest complete checkpoint."""
    steps = complete_steps(out)
    intact = (
        f"checkpoint {out / f'global_step_{steps[-1]}'} intact: {AGAIN}"
        if steps
        else "no checkpoint yet: the same command starts the run afresh"
    )
    if kind.startswith("stopped"):
        step = int(kind.split()[1])
        return (
            f"dagrl: Ctrl-C: stopped after step {step} of {TOTAL}; checkpoint {out / f'global_step_{step}'} "
            f"written: {AGAIN}"
        )
    if kind == "second":
        return f"dagrl: second Ctrl-C: stopped at once without a checkpoint; {intact}"
    return f"dagrl: Ctrl-C with no step under way: stopped at once, nothing unsaved; {intact}"


# (DAGRL_SIGNAL, the launch's last line, the complete checkpoints after it); each launch resumes the one before
MID_STEP = ("actor_update:2=SIGINT", "stopped 2", [2])  # the step ends, its validation runs, then the checkpoint
SECOND_IN_ITS_SAVE = ("actor_update:5=SIGINT,before_marker:5=SIGINT", "second", None)  # the newest stays as it was
PLANS = {
    "mid-step, then twice": [MID_STEP, SECOND_IN_ITS_SAVE],
    "every phase": [
        ("validation:0=SIGINT", "idle", []),  # before the first step: nothing to keep, at once
        MID_STEP,
        ("validation:4=SIGINT", "stopped 4", [2, 4]),  # a validation after an unsaved step: finished
        SECOND_IN_ITS_SAVE,
    ],
}


@pytest.mark.parametrize("plan", ["mid-step, then twice", pytest.param("every phase", marks=pytest.mark.slow)])
def test_ctrl_c_keeps_the_work_and_the_relaunches_match_an_uninterrupted_run(tiny_model, tiny_data, tmp_path, plan):
    straight, out, trace = tmp_path / "straight", tmp_path / "run", tmp_path / "trace"
    args = run_args(tiny_model, tiny_data, out)
    with ThreadPoolExecutor(1) as pool:
        baseline = pool.submit(
            run_in_session,
            [sys.executable, "-m", "dagrl.main_dag", *run_args(tiny_model, tiny_data, straight)],
            ONE_THREAD,
        )
        code, stderr = ctrl_c_in_start_up(args, trace)
        assert code == 130 and "Traceback" not in stderr, stderr[-3000:]
        assert not trace.exists() and complete_steps(out) == [], "the Ctrl-C came after start-up"
        assert dagrl_lines(stderr) == [stderr.splitlines()[-1]] and "nothing" in stderr.splitlines()[-1], stderr

        for signals, kind, saved in PLANS[plan]:
            before = {step: checkpoint_state(out / f"global_step_{step}") for step in complete_steps(out)}
            record = launch(args, out, trace, None, env={**ONE_THREAD, "DAGRL_SIGNAL": signals})
            where = f"{signals}:\n{record.stderr_tail}"
            assert record.code == 130 and "Traceback" not in record.stderr_tail, where
            assert dagrl_lines(record.stderr_tail) == [expected_line(kind, out)], where
            assert record.stderr_tail.splitlines()[-1] == expected_line(kind, out), where
            if kind.startswith("stopped"):  # the step's validation ran before the checkpoint
                assert VAL in metrics_by_step(out)[int(kind.split()[1])], where
            if saved is not None:
                assert complete_steps(out) == saved, where
            else:  # cut inside the checkpoint: left as a partial save, every complete one unchanged
                assert complete_steps(out) == sorted(before) and partial_dirs(out) == [".tmp_global_step_5"], where
                assert not [
                    d
                    for step in before
                    for d in differences(before[step], checkpoint_state(out / f"global_step_{step}"))
                ], where

        record = launch(args, out, trace, None, env=ONE_THREAD)  # the same command, to the end
        assert record.code == 0 and record.resumed_from == max(before), record.stderr_tail
        code, stderr = baseline.result()
    assert code == 0, stderr[-3000:]
    assert partial_dirs(out) == [] and complete_steps(out)[-1] == TOTAL
    assert metrics_by_step(out) == metrics_by_step(straight)
    name = f"global_step_{TOTAL}"
    diff = differences(checkpoint_state(straight / name), checkpoint_state(out / name))
    assert not diff, f"{name} differs from the uninterrupted run's at {diff[:5]}"


@pytest.mark.slow
@pytest.mark.parametrize("pools", [False, True], ids=["colocated", "two pools"])
def test_ctrl_c_to_torchrun_stops_every_worker_at_one_step_boundary_with_a_checkpoint(
    tiny_model, tiny_data, tmp_path, pools
):
    """The terminal's SIGINT reaches torchrun only (its workers run in sessions of their own); it sends each worker
    SIGINT. Every worker stops after the same step, the training side's rank 0 prints the line, and the relaunch
    matches an uninterrupted run."""
    extra = (
        {"actor_rollout_ref.hybrid_engine": False, "async_training.max_staleness": 0}
        if pools
        else {"trainer.n_gpus_per_node": 2}
    )
    straight, out, trace = tmp_path / "straight", tmp_path / "run", tmp_path / "trace"
    extra = {**extra, "trainer.val_before_train": False}
    with ThreadPoolExecutor(1) as pool:
        baseline = pool.submit(run_in_session, torchrun(run_args(tiny_model, tiny_data, straight, **extra)))
        with session_process(
            torchrun(run_args(tiny_model, tiny_data, out, **extra)), {"DAGRL_FAULT_TRACE": str(trace)}
        ) as (proc, err):
            wait_for_point(proc, trace, "actor_update", 2)
            os.killpg(proc.pid, signal.SIGINT)  # the terminal's foreground group: torchrun itself
            proc.wait(timeout=120)  # torchrun's own exit code and traceback follow its SignalException
            err.seek(0)
            stderr = err.read()
        saved = complete_steps(out)
        assert len(saved) == 1 and 2 <= saved[0] < TOTAL, stderr[-3000:]
        assert dagrl_lines(stderr) == [expected_line(f"stopped {saved[0]}", out)], stderr[-3000:]
        code, stderr = run_in_session(torchrun(run_args(tiny_model, tiny_data, out, **extra)))
        assert code == 0 and f"(step {saved[0]})" in stderr, stderr[-3000:]
        code, stderr = baseline.result()
    assert code == 0, stderr[-3000:]
    assert metrics_by_step(out) == metrics_by_step(straight)


def test_a_kill_while_an_old_checkpoint_is_pruned_leaves_a_partial_save_not_a_damaged_checkpoint(tmp_path, monkeypatch):
    from dagrl.trainer import checkpoint
    from dagrl.trainer.checkpoint import CheckpointManager, complete_checkpoints, partial_saves

    def write(directory: Path) -> None:
        (directory / "actor").mkdir()
        (directory / "actor" / "shard").write_text("weights")

    manager = CheckpointManager(str(tmp_path), keep=1, rank=0, barrier=lambda: None)
    manager.save(1, write)
    removed = shutil.rmtree

    def killed_midway(path, *args, **kwargs):  # the shards go first, then the process dies
        removed(Path(path) / "actor")
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint.shutil, "rmtree", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        manager.save(2, write)
    assert [step for step, _ in complete_checkpoints(tmp_path)] == [2]
    assert [path.name for path in partial_saves(tmp_path)] == [".tmp_global_step_1"]
    assert all((path / "actor" / "shard").is_file() for _, path in complete_checkpoints(tmp_path))


def test_where_the_same_command_would_not_resume_the_line_gives_the_one_that_does(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from dagrl.trainer.checkpoint import MARKER
    from dagrl.utils.preemption import resume_advice

    (tmp_path / "global_step_3").mkdir()
    (tmp_path / "global_step_3" / MARKER).write_text('{"global_step": 3}')
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setattr(sys, "argv", ["main_dag.py", "data.seed=1", "trainer.resume_mode=disable"])
    trainer = SimpleNamespace(default_local_dir=str(tmp_path), resume_mode="disable", resume_from_path=None)
    assert resume_advice(trainer, "written") == (
        f"checkpoint {tmp_path / 'global_step_3'} written: resume from it with trainer.resume_mode=auto (the same "
        f"command: python3 -m dagrl.main_dag data.seed=1 trainer.resume_mode=auto)"
    )
