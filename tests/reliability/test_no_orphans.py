"""kill -9 of the trainer leaves nothing behind: within seconds no process of the run is left (megatron's
checkpoint writer left a spawned multiprocessing Manager holding torch and the log file, and the resource tracker,
alive for good; a writer forked mid-save hung forever) and no temporary directory (megatron's `import wandb` made
two)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

from tests.conftest import cpu_run_overrides
from tests.helpers import session_process
from tests.reliability.harness import MARKER
from tests.trainer.test_end_to_end import REWARD

GRACE_S = 5.0


def session_members(sid: int) -> list[str]:
    """'pid cmdline' of each live (not zombie) process of session `sid`."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if os.getsid(process.pid) == sid and process.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(f"{process.pid} {' '.join(process.info['cmdline'] or [])[:160]}")
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def left_after(sid: int, seconds: float) -> list[str]:
    """The session's processes still alive `seconds` from now (sooner if none is)."""
    deadline = time.monotonic() + seconds
    while (left := session_members(sid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_kill_9_of_the_trainer_after_a_checkpoint_leaves_no_process(tiny_model, tiny_data, tmp_path):
    out, scratch = tmp_path / "run", tmp_path / "tmp"
    scratch.mkdir()
    args = cpu_run_overrides(
        tiny_model,
        tiny_data,
        out,
        **{
            "custom_reward_function.path": str(REWARD),
            "data.val_files": "null",
            "trainer.val_before_train": False,
            "trainer.test_freq": -1,
            "trainer.total_training_steps": 50,
            "trainer.save_freq": 1,
        },
    )
    with session_process([sys.executable, "-m", "dagrl.main_dag", *args], {"TMPDIR": str(scratch)}) as (proc, err):
        deadline = time.monotonic() + 300
        while not (out / "global_step_1" / MARKER).is_file():
            if proc.poll() is not None or time.monotonic() > deadline:
                err.seek(0)
                raise AssertionError(f"no complete global_step_1 (exit {proc.poll()}):\n{err.read()[-3000:]}")
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before the kill"
        before = session_members(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -9
        left = left_after(proc.pid, GRACE_S)
        assert not left, (
            f"{GRACE_S:.0f} s after kill -9 of the trainer these processes of its session live on:\n"
            + "\n".join(left)
            + "\n(the session before the kill:\n"
            + "\n".join(before)
            + ")"
        )
    # torch's compile cache directory is kept on purpose; nothing else a run makes in TMPDIR outlives it
    assert not [p.name for p in scratch.iterdir() if not p.name.startswith("torchinductor_")]


def test_a_child_forked_inside_children_die_with_us_dies_with_its_parent(tmp_path):
    """The checkpoint writer's pattern: a forked process blocked forever on a queue whose other end was its parent
    (megatron's count queue, filled by the parent's feeder thread). Killed with the parent, not left to hang; a child
    forked outside the block is not affected."""
    script = textwrap.dedent("""
        import multiprocessing, sys, time
        from dagrl.utils.lifetime import children_die_with_us

        fork = multiprocessing.get_context("fork")
        never = fork.Queue()
        with children_die_with_us():
            inside = fork.Process(target=never.get, daemon=True)
            inside.start()
        outside = fork.Process(target=time.sleep, args=(30,), daemon=True)
        outside.start()
        print(inside.pid, outside.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
        start_new_session=True,
    )
    try:
        inside, outside = (int(pid) for pid in parent.stdout.readline().split())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
        left = left_after(parent.pid, GRACE_S)
        assert not any(line.split()[0] == str(inside) for line in left), left
        assert any(line.split()[0] == str(outside) for line in left), left  # only the guarded block's forks
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
