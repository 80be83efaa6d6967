"""A scheduler's SIGTERM/SIGUSR1 to the Ray driver: before the workers train, the launch stops at once (one line, exit
0, as a start-up stop); once they train, it is passed on to every worker once, the workers stop after the step under
way with a checkpoint, and the driver exits 0 with one line."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.helpers import metrics_by_step, session_process
from tests.launch.test_ray_launcher import ray_args
from tests.reliability.harness import complete_steps, wait_for_point

ray = pytest.importorskip("ray")
WHERE = [("n0", 1), ("n1", 2)]


@pytest.mark.parametrize("said", ["", "SIGTERM before the run started: stopped, nothing to save"])
def test_a_stop_while_the_workers_train_is_passed_on_once_and_their_stop_raises_stopped(monkeypatch, said):
    """(Ray's wait and get replaced: the signal arrives inside the wait, then again, as a scheduler repeats it.) The
    driver's line, or the workers' where they stopped during their start-up."""
    from dagrl.launch import driver_signals, ray_cluster

    sent, waits = [], []
    monkeypatch.setattr(ray_cluster, "forward", lambda where, signum: sent.append((where, signum)))

    def wait(refs, num_returns=1, timeout=None):
        waits.append(list(refs))
        if len(waits) == 1:  # the first signal breaks the wait
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            raise AssertionError("the SIGTERM did not break ray.wait")
        if len(waits) == 2:  # the second one comes while the workers finish their step
            os.kill(os.getpid(), signal.SIGTERM)
        return refs[:1], refs[1:]

    monkeypatch.setattr(ray, "wait", wait)
    monkeypatch.setattr(ray, "get", lambda ref: (0, said))
    before = signal.getsignal(signal.SIGTERM)
    with driver_signals.DriverSignals() as signals:
        with pytest.raises(driver_signals.Stopped) as stopped:
            ray_cluster._watch({"r0": 0, "r1": 1}, ["w0", "w1"], WHERE, signals)
    assert sent == [(WHERE, signal.SIGTERM)]  # passed on once
    assert signal.getsignal(signal.SIGTERM) is before
    assert stopped.value.line("<advice>") == (
        said or "SIGTERM: the Ray workers stopped after the step under way, with its checkpoint; <advice>"
    )


def test_a_stop_while_the_workers_start_stops_the_launch_as_a_start_up_stop(monkeypatch):
    from dagrl.config.load import compose
    from dagrl.launch import ray_cluster
    from dagrl.utils.preemption import StopBeforeStart

    def connect(*args) -> None:  # the signal comes while the driver joins the cluster
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(5)
        raise AssertionError("the SIGUSR1 did not stop the launch")

    monkeypatch.setattr(ray_cluster, "_connect", connect)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    with pytest.raises(StopBeforeStart) as stop:
        ray_cluster.launch(compose(["trainer.launcher=ray"]))
    assert stop.value.line() == "SIGUSR1 before the run started: stopped, nothing to save"


@pytest.mark.slow  # a minute of Ray; the fast tests above hold the driver's part
def test_sigterm_to_the_driver_stops_every_worker_after_the_step_with_a_checkpoint(tiny_model, tiny_data, tmp_path):
    out, trace = tmp_path / "run", tmp_path / "trace"
    args = ray_args(tiny_model, tiny_data, out, **{"trainer.total_training_steps": 4, "trainer.save_freq": 4})
    slow = {"DAGRL_FAULT_TRACE": str(trace), "DAGRL_DELAY": "actor_update:3"}  # a step outlasts the passing-on
    with session_process(args, slow) as (proc, err):
        wait_for_point(proc, trace, "actor_update", 2)
        os.kill(proc.pid, signal.SIGTERM)  # the driver only, as a scheduler signals the job's process
        code = proc.wait(timeout=180)
        err.seek(0)
        stderr = err.read()
    assert code == 0 and complete_steps(out) == [2], stderr[-3000:]
    assert stderr.splitlines()[-1] == (
        f"dagrl: SIGTERM: the Ray workers stopped after the step under way, with its checkpoint; checkpoint "
        f"{out / 'global_step_2'} intact: run the same command again to resume from it"
    ), stderr[-3000:]
    assert "Traceback" not in stderr and "stopped on SIGTERM after step 2 of 4" in stderr, stderr[-3000:]
    assert sorted(step for step in metrics_by_step(out) if step > 0) == [1, 2]
