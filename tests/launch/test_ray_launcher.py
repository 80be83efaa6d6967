"""trainer.launcher=ray on CPU: two Ray workers rendezvous over gloo and train; one worker dying ends the whole
job within 60 s naming its rank, and a relaunch resumes; Ctrl-C to the driver stops the workers with a checkpoint;
two emulated Ray nodes (slow)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import cpu_run_overrides
from tests.helpers import metrics_by_step, run_concurrently, run_in_session, session_process
from tests.reliability.harness import complete_steps, wait_for_point

pytest.importorskip("ray")
REWARD = Path(__file__).resolve().parents[1] / "trainer" / "reward_by_length.py"


def ray_args(model, data, out: Path, **extra) -> list[str]:
    return [
        sys.executable,
        "-m",
        "dagrl.main_dag",
        *cpu_run_overrides(
            model,
            data,
            out,
            **{
                "trainer.launcher": "ray",
                "trainer.n_gpus_per_node": 2,
                "custom_reward_function.path": str(REWARD),
                "trainer.total_training_steps": 3,
                "trainer.save_freq": 1,
                "trainer.test_freq": -1,
                "trainer.val_before_train": False,
                **extra,
            },
        ),
    ]


@pytest.mark.slow  # a minute; the default suite keeps Ray's Ctrl-C stop and relaunch
def test_worker_death_stops_the_job_naming_the_rank_and_a_relaunch_resumes(tiny_model, tiny_data, tmp_path):
    out, trace = tmp_path / "run", tmp_path / "faults.trace"
    env = {"DAGRL_FAULT": "actor_update:2@1", "DAGRL_FAULT_TRACE": str(trace)}
    code, stderr = run_in_session(ray_args(tiny_model, tiny_data, out), env=env, timeout=300)
    ended = time.time()
    assert code != 0, stderr[-3000:]
    assert "dagrl: error: rank 1 failed: worker process died" in stderr, stderr[-3000:]
    killed_at = max(
        float(line.split()[0]) for line in trace.read_text().splitlines() if line.split()[1:] == ["actor_update", "2"]
    )
    assert ended - killed_at < 60, f"the job took {ended - killed_at:.0f} s to stop after rank 1 died"
    assert (out / "global_step_1").is_dir() and not (out / "global_step_2").exists()

    code, stderr = run_in_session(ray_args(tiny_model, tiny_data, out), timeout=300)
    assert code == 0, stderr[-3000:]
    assert "(step 1)" in stderr and "resumed from" in stderr, stderr[-3000:]
    metrics = metrics_by_step(out)
    assert sorted(step for step in metrics if step > 0) == [1, 2, 3]
    assert metrics[3]["training/global_step"] == 3.0


def test_ctrl_c_to_the_driver_stops_every_worker_after_one_step_with_a_checkpoint(tiny_model, tiny_data, tmp_path):
    """The terminal's Ctrl-C (SIGINT to the driver's process group; Ray's workers run in sessions of their own with
    SIGINT blocked) is passed on to each worker: both stop after the same step with a checkpoint, the driver prints
    the training rank 0's line and exits 130. (That a checkpoint a Ctrl-C wrote resumes exactly:
    tests/reliability/test_ctrl_c.py.)"""
    out, trace = tmp_path / "run", tmp_path / "trace"
    args = ray_args(tiny_model, tiny_data, out, **{"trainer.total_training_steps": 4, "trainer.save_freq": 4})
    slow = {"DAGRL_FAULT_TRACE": str(trace), "DAGRL_DELAY": "actor_update:3"}  # a step outlasts the passing-on
    with session_process(args, slow) as (proc, err):
        wait_for_point(proc, trace, "actor_update", 2)
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=180)
        err.seek(0)
        stderr = err.read()
    saved = complete_steps(out)
    assert code == 130 and saved == [2], stderr[-3000:]
    assert stderr.splitlines()[-1] == (
        f"dagrl: Ctrl-C: stopped after step {saved[0]} of 4; checkpoint "
        f"{out / f'global_step_{saved[0]}'} written: run the same command again to "
        f"resume from it"
    ), stderr[-3000:]
    assert "Traceback" not in stderr and "stopped at once" not in stderr, stderr[-3000:]
    assert sorted(step for step in metrics_by_step(out) if step > 0) == [1, 2]


PLUGIN = """from dagrl.algo.catalog import ADV_ESTIMATORS
ADV_ESTIMATORS.register("grpo_from_a_plugin", "dagrl.algo.advantage:grpo", "GRPO, registered by a user module")
"""


@pytest.mark.slow  # two pools run under torchrun in CI (tests/trainer/test_two_pools.py); Ray's launch of them here
def test_separate_pools_on_ray_workers_train_and_match_torchrun(tiny_model, tiny_data, tmp_path):
    """actor_rollout_ref.hybrid_engine=false under Ray: one placement group per pool, the rollout pool's worker first;
    at K=0 the run equals the same pools under torchrun. Both use an estimator that only trainer.plugins registers:
    the Ray workers, which start from dagrl's entry point, import it too."""
    from tests.engine.engine_helpers import free_port

    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "my_estimators.py").write_text(PLUGIN)
    path = {"PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path / "plugins"), os.environ.get("PYTHONPATH")]))}
    pools = {
        "actor_rollout_ref.hybrid_engine": False,
        "rollout.n_gpus_per_node": 1,
        "trainer.n_gpus_per_node": 1,
        "async_training.max_staleness": 0,
        "trainer.total_training_steps": 2,
        "trainer.plugins": "[my_estimators]",
        "algorithm.adv_estimator": "grpo_from_a_plugin",
    }
    args = ray_args(tiny_model, tiny_data, tmp_path / "torchrun", **pools, **{"trainer.launcher": "local"})[3:]
    results = run_concurrently(
        [  # side by side: much of a Ray launch is Ray starting
            (ray_args(tiny_model, tiny_data, tmp_path / "ray", **pools), path),
            (
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--nproc-per-node",
                    "2",
                    "--master-port",
                    str(free_port()),
                    "-m",
                    "dagrl.main_dag",
                    *args,
                ],
                path,
            ),
        ],
        timeout=300,
    )
    for code, stderr in results:
        assert code == 0, stderr[-3000:]
    assert metrics_by_step(tmp_path / "ray") == metrics_by_step(tmp_path / "torchrun")
    assert metrics_by_step(tmp_path / "ray")[2]["actor/grad_norm"] > 0


def test_bad_config_fails_in_the_driver_before_any_worker(tiny_model, tiny_data, tmp_path):
    args = ray_args(tiny_model, tiny_data, tmp_path / "run", **{"data.train_batch_size": 3})
    scratch = tmp_path / "tmp"  # where a Ray cluster started by the run would keep its session (TMPDIR/ray)
    scratch.mkdir()
    code, stderr = run_in_session(args, env={"TMPDIR": str(scratch)}, timeout=120)
    assert code == 2 and "data.train_batch_size" in stderr, stderr[-2000:]
    assert "ray:" not in stderr and not (scratch / "ray").exists()  # no worker, no cluster


@pytest.mark.slow
def test_two_emulated_ray_nodes_one_worker_each(tiny_model, tiny_data, tmp_path):
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        args = ray_args(
            tiny_model,
            tiny_data,
            tmp_path / "run",
            **{
                "trainer.nnodes": 2,
                "trainer.n_gpus_per_node": 1,
                "trainer.ray_address": cluster.address,
                "trainer.total_training_steps": 2,
            },
        )
        code, stderr = run_in_session(args, timeout=300)
        assert code == 0, stderr[-3000:]
        assert "2 worker(s) on 2 node(s)" in stderr
        assert sorted(step for step in metrics_by_step(tmp_path / "run") if step > 0) == [1, 2]
    finally:
        cluster.shutdown()


@pytest.mark.parametrize("death_seen", [True, False])
def test_a_peers_error_that_arrives_before_the_death_behind_it_reports_the_death(monkeypatch, death_seen):
    """Rank 1 killed outright: rank 0's collective fails on the reset connection and its error reaches the launcher
    first. The launcher waits DEATH_GRACE_S for the others and names the dead rank; with no death in that time, the
    first error stands. (Ray's wait/get replaced: the order of arrival is what is tested.)"""
    import ray
    from dagrl.launch import ray_cluster

    results = {"r0": (1, "Read error [127.0.0.1]:8084: Connection reset by peer"), "r1": None}
    waits = []

    def wait(refs, num_returns=1, timeout=None):
        waits.append(timeout)
        arrived = ["r0"] + (["r1"] if death_seen or timeout is None else [])
        done = [ref for ref in arrived if ref in refs][:num_returns]
        return done, [ref for ref in refs if ref not in done]

    def get(ref):
        if results[ref] is None:
            raise ray.exceptions.RayActorError()
        return results[ref]

    monkeypatch.setattr(ray, "wait", wait)
    monkeypatch.setattr(ray, "get", get)
    monkeypatch.setattr(ray, "kill", lambda worker, no_restart=True: None)
    with pytest.raises(ray_cluster.WorkerFailed) as failed:
        ray_cluster._watch({"r0": 0, "r1": 1}, ["w0", "w1"], [("n0", 1), ("n1", 2)])
    assert waits == [None, ray_cluster.DEATH_GRACE_S]
    if death_seen:
        assert failed.value.rank == 1 and "worker process died" in str(failed.value)
    else:
        assert failed.value.rank == 0 and "Connection reset by peer" in str(failed.value)
