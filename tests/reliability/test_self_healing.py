"""Runs that heal themselves (CPU, gloo): a hung rank is found within trainer.hang_timeout_s + 10 s with every rank's
stacks written and the run ends naming it; a launcher's restart (torchrun --max-restarts, trainer.max_restarts under
Ray) resumes and finishes with the metrics of an uninterrupted run; SIGTERM stops the run after the current step
with a checkpoint and exit code 0, and the relaunch finishes exactly as an uninterrupted run (colocated, and with
separate pools where the rollout pool got the signal)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import cpu_run_overrides
from tests.helpers import metrics_by_step, run_concurrently, run_in_session, session_process
from tests.engine.engine_helpers import free_port
from tests.reliability.harness import wait_for_point
from tests.trainer.test_end_to_end import REWARD

HANG_TIMEOUT = 8


def overrides(model, data, out: Path, **extra) -> list[str]:
    return cpu_run_overrides(
        model,
        data,
        out,
        **{
            "custom_reward_function.path": str(REWARD),
            "trainer.total_training_steps": 4,
            "trainer.save_freq": 1,
            "trainer.test_freq": -1,
            "trainer.val_before_train": False,
            "trainer.hang_timeout_s": HANG_TIMEOUT,
            **extra,
        },
    )


def torchrun(args: list[str], processes: int = 2, restarts: int = 0) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(processes),
        "--master-port",
        str(free_port()),
        "--max-restarts",
        str(restarts),
        "-m",
        "dagrl.main_dag",
        *args,
    ]


def steps_only(records: dict[int, dict]) -> dict[int, dict]:
    return {step: {k: v for k, v in record.items() if k != "training/restarts"} for step, record in records.items()}


@pytest.fixture(scope="module")
def straight(tiny_model, tiny_data, tmp_path_factory) -> dict[int, dict]:
    """The uninterrupted run's metrics (DP2 under torchrun)."""
    out = tmp_path_factory.mktemp("straight") / "run"
    code, stderr = run_in_session(torchrun(overrides(tiny_model, tiny_data, out, **{"trainer.n_gpus_per_node": 2})))
    assert code == 0, stderr[-3000:]
    return metrics_by_step(out)


@pytest.mark.parametrize(
    "phase",
    [
        "actor_update",
        pytest.param("rollout", marks=pytest.mark.slow),
        pytest.param("old_log_prob", marks=pytest.mark.slow),
        pytest.param("before_shards", marks=pytest.mark.slow),
    ],
)
def test_a_hung_rank_is_found_with_every_ranks_stacks_and_ends_the_run(tiny_model, tiny_data, tmp_path, phase):
    """One rank sleeps forever at the start of step 2's `phase` (before_shards: rank 0, which runs the checkpoint's
    phases, inside the checkpoint of step 2; otherwise rank 1)."""
    hung, peer = (0, 1) if phase == "before_shards" else (1, 0)
    out, trace = tmp_path / "run", tmp_path / "faults.trace"
    args = overrides(tiny_model, tiny_data, out, **{"trainer.n_gpus_per_node": 2})
    code, stderr = run_in_session(
        torchrun(args), {"DAGRL_HANG": f"{phase}:2@{hung}", "DAGRL_FAULT_TRACE": str(trace)}, timeout=300
    )
    ended = time.time()
    assert code != 0
    hung_at = max(float(line.split()[0]) for line in trace.read_text().splitlines() if line.split()[1:] == [phase, "2"])
    assert ended - hung_at < HANG_TIMEOUT + 10, f"the hang ended the run {ended - hung_at:.0f} s after it began"
    assert f"dagrl: error: rank {hung} hung: no progress for" in stderr and f"in phase {phase} of step 2" in stderr
    stacks = {rank: (out / "hang" / f"rank{rank}.txt").read_text() for rank in (0, 1)}
    assert stacks[hung].startswith(f"rank {hung}: no progress") and "fault_point" in stacks[hung]  # where it sleeps
    # the peer, waiting for it in a collective: told through the store, it writes where it was before exiting
    assert stacks[peer].startswith((f"rank {peer}: stopped because rank {hung} hung", f"rank {peer}: no progress"))
    assert "Thread" in stacks[peer]
    assert not (out / "global_step_2").exists() and (out / "global_step_1").is_dir()


def test_sigusr1_is_a_stop_signal_too_and_a_world_of_one_agrees_on_it():
    from dagrl.utils.preemption import StopRequest

    stop = StopRequest()
    try:
        assert stop.agreed() is None
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.signal == "SIGUSR1" and stop.agreed() == "SIGUSR1" and stop.seconds_since() >= 0
    finally:
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.mark.slow  # 70 s; the default suite keeps the hang detector and the exact SIGTERM relaunch
def test_torchrun_max_restarts_resumes_a_hung_run_to_the_uninterrupted_metrics(
    tiny_model, tiny_data, tmp_path, straight
):
    out = tmp_path / "run"
    args = overrides(tiny_model, tiny_data, out, **{"trainer.n_gpus_per_node": 2})
    env = {"DAGRL_HANG": "actor_update:3@0", "DAGRL_HANG_ONCE": str(tmp_path / "hung_once")}
    code, stderr = run_in_session(torchrun(args, restarts=1), env, timeout=400)
    assert code == 0, stderr[-3000:]
    assert (out / "hang" / "rank0.txt").is_file() and "resumed from" in stderr
    records = metrics_by_step(out)
    assert steps_only(records) == straight
    assert records[4]["training/restarts"] == 1.0


@pytest.mark.slow  # the torchrun variant above runs in CI: the watchdog, the restart and the exact resume are the same
def test_ray_max_restarts_resumes_a_hung_run_to_the_uninterrupted_metrics(tiny_model, tiny_data, tmp_path, straight):
    pytest.importorskip("ray")
    out = tmp_path / "run"
    args = overrides(
        tiny_model,
        tiny_data,
        out,
        **{"trainer.n_gpus_per_node": 2, "trainer.launcher": "ray", "trainer.max_restarts": 1},
    )
    env = {"DAGRL_HANG": "old_log_prob:2@1", "DAGRL_HANG_ONCE": str(tmp_path / "hung_once")}
    code, stderr = run_in_session([sys.executable, "-m", "dagrl.main_dag", *args], env, timeout=400)
    assert code == 0, stderr[-3000:]
    assert "restart 1 of 1 (trainer.max_restarts) after rank" in stderr
    assert steps_only(metrics_by_step(out)) == straight


ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # the SIGTERM tests' runs go two at a time on two cores (the same in every run)


def sigterm_run(model, data, root: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dagrl.main_dag",
        *overrides(model, data, root, **{"trainer.save_freq": -1, "trainer.total_training_steps": 8}),
    ]


@pytest.fixture(scope="module")
def sigterm_straight(tiny_model, tiny_data, tmp_path_factory):
    """The uninterrupted run every SIGTERM test compares with (one for all seeds: the same run), as a call that waits
    for it: it starts with the first seed's test and goes on beside that test's own runs."""
    out = tmp_path_factory.mktemp("sigterm_straight") / "run"
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(run_in_session, sigterm_run(tiny_model, tiny_data, out), ONE_THREAD)

        def finished() -> Path:
            code, stderr = run.result()
            assert code == 0, stderr[-3000:]
            return out

        yield finished


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])  # another random moment
def test_sigterm_stops_after_the_step_with_a_checkpoint_and_the_relaunch_is_exact(
    tiny_model, tiny_data, tmp_path, sigterm_straight, seed
):
    """SIGTERM at a seeded random moment: a random point of a random early step (read from the fault trace) plus a
    random delay (a tiny step takes ~0.1 s); the run stops after the step it was in or a later one, before the end."""
    import random

    rng = random.Random(seed)
    step, phase = rng.randint(1, 3), rng.choice(["rollout", "old_log_prob", "actor_update"])
    delay, total = rng.random() * 0.2, 8
    out, trace = tmp_path / "run", tmp_path / "faults.trace"
    with session_process(sigterm_run(tiny_model, tiny_data, out), {**ONE_THREAD, "DAGRL_FAULT_TRACE": str(trace)}) as (
        proc,
        err,
    ):
        wait_for_point(proc, trace, phase, step)
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=120)
        err.seek(0)
        stderr = err.read()
    assert code == 0, stderr[-3000:]
    saved = [p.name for p in out.glob("global_step_*")]  # save_freq=-1: only the preemption's checkpoint
    assert len(saved) == 1 and step <= int(saved[0].rpartition("_")[2]) < total, saved
    stopped = int(saved[0].rpartition("_")[2])
    assert f"stopped on SIGTERM after step {stopped} of {total}: checkpoint global_step_{stopped} written" in stderr
    code, stderr = run_in_session(sigterm_run(tiny_model, tiny_data, out), ONE_THREAD)
    assert code == 0 and f"(step {stopped})" in stderr, stderr[-3000:]
    assert metrics_by_step(out) == metrics_by_step(sigterm_straight())
    ledger = [json.loads(line)["uid"] for line in (out / "prompt_ledger.jsonl").read_text().splitlines()]
    assert len(ledger) == len(set(ledger)) == total * 4


@pytest.mark.slow  # a minute; the default suite keeps the colocated SIGTERM stop and the two-pool kill -9 resumes
def test_a_stop_signal_in_the_rollout_pool_stops_both_pools_at_a_step_boundary(tiny_model, tiny_data, tmp_path):
    pools = {"actor_rollout_ref.hybrid_engine": False, "async_training.max_staleness": 0, "trainer.save_freq": -1}
    straight_out, out = tmp_path / "straight", tmp_path / "run"
    (code, stderr), straight = run_concurrently(
        [  # the uninterrupted run beside: two cores, less wait
            (
                torchrun(overrides(tiny_model, tiny_data, out, **pools)),
                {"DAGRL_SIGNAL": "score:2@0"},
            ),  # the rollout pool
            (torchrun(overrides(tiny_model, tiny_data, straight_out, **pools)), {}),
        ]
    )
    assert code == 0, stderr[-3000:]
    assert "stopped on SIGTERM after step" in stderr and "the training pool stopped early" in stderr
    saved = sorted(p.name for p in out.glob("global_step_*"))
    assert len(saved) == 1 and saved[0] in ("global_step_1", "global_step_2", "global_step_3")
    code, stderr = run_in_session(torchrun(overrides(tiny_model, tiny_data, out, **pools)))
    assert code == 0, stderr[-3000:]
    assert straight[0] == 0, straight[1][-3000:]
    assert metrics_by_step(out) == metrics_by_step(straight_out)
