"""Separate rollout and training pools (actor_rollout_ref.hybrid_engine=false) on CPU with the hf rollout: K=0 is the
colocated run exactly (1+1 and 2+2 processes); the staleness bound holds on every trained trajectory and is reached
when training is the slow side; partial rollout carries prefixes across pushes; kill -9 of the training pool and a
relaunch train every prompt exactly once (K=0: bit-exact); a pool that stops on an error stops the other."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

from dagrl.dag.graph import build_graph
from dagrl.engine.megatron.lora import read_adapter
from dagrl.placement import Placement
from dagrl.trainer.ledger import LEDGER_FILE
from dagrl.trainer.pools.schedule import Schedule, split_graph
from dagrl.trainer.pools.wire import pack_buckets, unpack_bucket
from tests.conftest import cpu_run_overrides
from tests.helpers import metrics_by_step, session_process, undocumented_metrics
from tests.engine.engine_helpers import free_port
from tests.trainer.test_end_to_end import REWARD

ENV = {"OMP_NUM_THREADS": "1"}
SLOW_TRAINER = {"DAGRL_DELAY": "actor_update:1.5"}  # the rollout pool runs ahead until the bound stops it


def command(args: list[str], processes: int, module: str = "dagrl.main_dag") -> list[str]:
    if processes == 1:
        return [sys.executable, "-m", module, *args]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(processes),
        "--master-port",
        str(free_port()),
        "-m",
        module,
        *args,
    ]


# torchrun's "Sending process <pid> closing signal SIGTERM": a worker died and torchrun stops the others, each with 30 s
# to exit before its SIGKILL (its _stop_workers does not pass --shutdown-timeout on). The surviving pool takes the
# SIGTERM for a preemption notice; waiting for its dead peer, it sees the peer's liveness counter stand still and
# stops by itself after DEAD_AFTER_S (it used to sit out all 30 s). The kill tests check that it did.
TORCHRUN_STOPS = re.compile(r"Sending process (\d+) closing signal SIGTERM")
STOP_GRACE_S = 20.0  # torchrun's 30 s, cut: a survivor still there after it did not stop by itself


def launch(*runs: tuple[list[str], int, dict]) -> list[tuple[int, str]]:
    """Each (args, processes, env) at the same time; (exit code, stderr) of each. In a run with a DAGRL_FAULT (a
    worker SIGKILLed), the processes torchrun says it stops get its SIGKILL after STOP_GRACE_S instead of 30 s;
    torchrun still notices the death, stops the rest and reports the failure itself."""
    with contextlib.ExitStack() as stack:
        started = [
            stack.enter_context(session_process(command(args, processes), {**ENV, **env}))
            for args, processes, env in runs
        ]
        results = []
        for (proc, err), (_, _, env) in zip(started, runs):
            if "DAGRL_FAULT" in env:
                cut_torchrun_grace(proc, err)
            code = proc.wait(timeout=600)
            err.seek(0)
            results.append((code, err.read()))
    return results


def cut_torchrun_grace(proc, err) -> None:
    """Until `proc` (torchrun) ends: STOP_GRACE_S after torchrun said it stops a worker, what torchrun does after its
    30 s (a SIGKILL to the worker's process group), to each that is still torchrun's child; a survivor killed so
    fails the test (it should have stopped by itself)."""
    told: dict[int, float] = {}
    killed: set[int] = set()
    while proc.poll() is None:
        text = os.pread(err.fileno(), os.fstat(err.fileno()).st_size, 0).decode(errors="replace")  # offset unmoved
        for pid in map(int, TORCHRUN_STOPS.findall(text)):
            told.setdefault(pid, time.monotonic())
        for pid, since in told.items():
            if pid not in killed and time.monotonic() - since > STOP_GRACE_S:
                killed.add(pid)
                with contextlib.suppress(OSError):  # gone already (reaped), or exited by itself
                    if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1] == str(proc.pid):
                        os.killpg(pid, signal.SIGKILL)
        time.sleep(0.1)
    assert not killed, f"torchrun's SIGTERM left {sorted(killed)} running for {STOP_GRACE_S} s"


def ok(result: tuple[int, str]) -> None:
    code, stderr = result
    assert code == 0, stderr[-3000:]


@pytest.fixture(scope="module")
def args(tiny_model, tiny_data):
    def make(out: Path, pools: tuple[int, int] | None = (1, 1), **extra) -> list[str]:
        split = (
            {}
            if pools is None
            else {
                "actor_rollout_ref.hybrid_engine": False,
                "rollout.n_gpus_per_node": pools[0],
                "trainer.n_gpus_per_node": pools[1],
            }
        )
        return cpu_run_overrides(
            tiny_model,
            tiny_data,
            out,
            **{
                "trainer.total_training_steps": 4,
                "trainer.save_freq": 2,
                "trainer.test_freq": 2,
                "trainer.val_before_train": False,
                "async_training.max_staleness": 0,
                "custom_reward_function.path": str(REWARD),
                **split,
                **extra,
            },
        )  # rewards that vary: updates that move

    return make


def without_async(records: dict[int, dict]) -> dict[int, dict]:
    return {step: {k: v for k, v in record.items() if not k.startswith("async/")} for step, record in records.items()}


def uids(root: Path) -> Counter:
    return Counter(json.loads(line)["uid"] for line in (root / LEDGER_FILE).read_text().splitlines())


# ---- the schedule and the wire format ----------------------------------------------------------------------------
def test_the_schedule_pushes_every_trigger_steps_and_at_every_validation():
    schedule = Schedule(start=2, total=9, trigger=3, test_freq=4, validates=True, val_before_train=True)
    assert [v for v in range(2, 10) if schedule.pushed(v)] == [2, 3, 4, 6, 8, 9]
    assert [v for v in range(2, 10) if schedule.validated(v)] == [2, 4, 8, 9]
    quiet = Schedule(start=0, total=5, trigger=1, test_freq=2, validates=False, val_before_train=True)
    assert not any(quiet.validated(v) for v in range(6)) and all(quiet.pushed(v) for v in range(6))


def test_weight_buckets_cross_the_wire_bit_exact():
    bucket = [
        ("a", torch.randn(3, 4, dtype=torch.bfloat16)),
        ("b", torch.arange(5, dtype=torch.float32)),
        ("c", torch.randn(2, 1, 3)),
    ]
    header, flats = pack_buckets(iter([bucket, bucket[:1]]))
    assert [f.dtype for f in flats] == [torch.uint8] * 2
    for entries, flat, original in zip(header, flats, [bucket, bucket[:1]]):
        restored = unpack_bucket(entries, flat.clone())
        assert [name for name, _ in restored] == [name for name, _ in original]
        assert all(t.dtype == o.dtype and torch.equal(t, o) for (_, t), (_, o) in zip(restored, original))


def test_after_a_stop_signal_a_peer_whose_liveness_counter_stands_still_stops_the_wait(monkeypatch):
    """The liveness check on a store of the launch's kind: nothing without a stop signal; with one, a peer that keeps
    bumping its counter is alive, one whose counter stood still for DEAD_AFTER_S raises PoolStopped naming it."""
    from torch.distributed import HashStore

    from dagrl.placement import bridge as bridge_module

    monkeypatch.setattr(bridge_module, "ALIVE_S", 0.05)
    monkeypatch.setattr(bridge_module, "DEAD_AFTER_S", 0.3)
    store = HashStore()
    placement = Placement.split(1, 1, 1, 1)  # launch rank 0: rollout, 1: train
    got: list[str | None] = [None]
    bridge = bridge_module.Bridge(store, None, placement, rank=0, stop_signal=lambda: got[0])
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:  # no stop signal: the training process's silence is not looked at
        bridge.check_failed()
        time.sleep(0.01)
    got[0] = "SIGTERM"
    deadline = time.monotonic() + 0.6
    while time.monotonic() < deadline:  # alive: it bumps its counter
        store.add(bridge_module.ALIVE_KEY.format(1), 1)
        bridge.check_failed()
        time.sleep(0.02)
    with pytest.raises(
        bridge_module.PoolStopped,
        match=r"launch rank 1 \(the train pool\) stopped answering .* "
        r"after this process got SIGTERM",
    ):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # killed: its counter stands still
            bridge.check_failed()
            time.sleep(0.01)
    # this process's own counter: bumped by its thread until `close`, which joins the thread (no store call may be
    # in flight when the interpreter shuts down: that aborted a process with "terminate called without ...")
    bridge.keep_alive()
    time.sleep(0.3)
    bridge.close()
    bumps = store.add(bridge_module.ALIVE_KEY.format(0), 0)
    time.sleep(0.2)
    assert bumps >= 3 and store.add(bridge_module.ALIVE_KEY.format(0), 0) == bumps


def test_a_finished_run_frees_every_process_group_of_both_pools(args, tmp_path):
    """Both pools wait for each other at the end (Bridge.finish), then free their groups, the bridge's too: no gloo
    worker is left to free a collective's tensors at interpreter shutdown (which can abort a finished run), and none
    frees its groups while the other pool still uses them."""
    with session_process(
        command(args(tmp_path / "run", **{"trainer.total_training_steps": 2}), 2, "tests.trainer.exit_threads"), ENV
    ) as (proc, err):
        code = proc.wait(timeout=600)
        err.seek(0)
        stderr = err.read()
    assert code == 0, stderr[-3000:]
    assert stderr.count("gloo threads at exit: 0") == 2, stderr[-3000:]  # 3 and 69 before


def test_the_graph_is_cut_at_the_layout_node():
    from dagrl.config.load import compose

    nodes = compose(["dag=dapo"])["dag"]["nodes"]
    rollout, train = split_graph(build_graph(nodes))
    assert [n.id for n in rollout.nodes] == ["weight_sync", "rollout", "score", "dynamic_sampling"]
    assert [n.id for n in train.nodes][0] == "to_actor_layout" and train.nodes[-1].id == "actor_update"


def test_placement_splits_the_launch_rollout_first():
    placement = Placement.split(1, 2, 1, 2)
    assert [placement.pool_of(r).name for r in range(4)] == ["rollout", "rollout", "train", "train"]
    assert placement.pool_of(3).local_env(3)["RANK"] == "1"


# ---- runs ----------------------------------------------------------------------------------------------------------
def test_k0_in_two_pools_is_the_colocated_run_and_resumes_bit_exact(args, tmp_path):
    colocated, straight, resumed = tmp_path / "colocated", tmp_path / "straight", tmp_path / "resumed"
    kill = {"DAGRL_FAULT": "actor_update:3@1"}  # the training process (launch rank 1) dies inside step 3
    results = launch((args(colocated, pools=None), 1, {}), (args(straight), 2, {}), (args(resumed), 2, kill))
    ok(results[0])
    ok(results[1])
    assert results[2][0] != 0  # torchrun reports the killed worker (and stopped the rollout pool)
    assert "launch rank 1 (the train pool) stopped answering" in results[2][1]  # the survivor stopped by itself
    assert sorted(p.name for p in resumed.glob("global_step_*")) == ["global_step_2"]
    ok(launch((args(resumed), 2, {}))[0])
    expected = metrics_by_step(colocated)
    assert without_async(metrics_by_step(straight)) == expected  # every loss, score and validation metric
    assert metrics_by_step(resumed) == metrics_by_step(straight)
    assert expected[4]["actor/grad_norm"] > 0 and "val-core/dagrl/arithmetic/acc/mean@1" in expected[4]
    records = metrics_by_step(straight)
    assert all(records[s]["async/staleness_max"] == 0 for s in range(1, 5))
    assert records[2]["async/push_gb"] > 0
    ledger = (colocated / LEDGER_FILE).read_bytes()
    assert (straight / LEDGER_FILE).read_bytes() == ledger == (resumed / LEDGER_FILE).read_bytes()


def test_merged_lora_in_two_pools_is_the_colocated_run(args, tmp_path):
    """LoRA's merged sync (the only one across pools: adapter-only loads in the colocated trainer) sends W + BA over
    the wire: at K=0 the run is the colocated one, and the checkpoint holds the adapter only."""
    lora = {
        "actor_rollout_ref.model.lora.rank": 4,
        "actor_rollout_ref.model.lora.alpha": 8,
        "actor_rollout_ref.model.lora.merge": True,
        "actor_rollout_ref.actor.optim.lr": 1e-2,
        "trainer.total_training_steps": 2,
        "trainer.test_freq": -1,
    }
    colocated, pools = tmp_path / "colocated", tmp_path / "pools"
    for result in launch((args(colocated, pools=None, **lora), 1, {}), (args(pools, **lora), 2, {})):
        ok(result)
    expected = metrics_by_step(colocated)
    assert without_async(metrics_by_step(pools)) == expected and expected[2]["actor/grad_norm"] > 0
    assert metrics_by_step(pools)[2]["async/push_gb"] > 0
    adapter = read_adapter(str(pools / "global_step_2" / "actor"))
    assert adapter.rank == 4 and adapter.tensors


@pytest.mark.slow  # 15 s; the default suite keeps K=0 pools = colocated (1 + 1, above) and a 2-rank rollout pool
def test_two_by_two_pools_at_k0_match_two_colocated_ranks(args, tmp_path):
    colocated, pools = tmp_path / "colocated", tmp_path / "pools"
    results = launch(
        (args(colocated, pools=None, **{"trainer.n_gpus_per_node": 2, "trainer.total_training_steps": 2}), 2, {}),
        (args(pools, pools=(2, 2), **{"trainer.total_training_steps": 2}), 4, {}),
    )
    for result in results:
        ok(result)
    assert without_async(metrics_by_step(pools)) == metrics_by_step(colocated)
    assert (pools / LEDGER_FILE).read_bytes() == (colocated / LEDGER_FILE).read_bytes()


def run_killed_and_straight(make, tmp_path: Path, env: dict, kill: str) -> tuple[Path, Path]:
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    results = launch((make(straight), 2, env), (make(resumed), 2, {**env, "DAGRL_FAULT": kill}))
    ok(results[0])
    assert results[1][0] != 0 and "stopped answering" in results[1][1]  # the survivor stopped by itself
    ok(launch((make(resumed), 2, env))[0])
    for root in (straight, resumed):
        assert max(uids(root).values()) == 1  # every prompt once, across the kill for `resumed`
        trained = [line for line in (root / LEDGER_FILE).read_text().splitlines() if '"trained@' in line]
        assert len(trained) == 6 * 4
    return straight, resumed


def slow_trainer_run(args):
    def make(out):
        overrides = {"trainer.total_training_steps": 6, "trainer.save_freq": 3, "trainer.test_freq": -1}
        return args(out, **{"async_training.max_staleness": 1, **overrides})

    return make


def test_a_slow_trainer_holds_the_rollout_pool_at_the_staleness_bound(args, tmp_path):
    """K=1: batch b waits for version b-2, so from the third step every batch is exactly one version stale."""
    straight = tmp_path / "straight"
    ok(launch((slow_trainer_run(args)(straight), 2, SLOW_TRAINER))[0])
    assert [metrics_by_step(straight)[s]["async/staleness_max"] for s in range(1, 7)] == [0, 1, 1, 1, 1, 1]
    assert max(uids(straight).values()) == 1
    buffered = [metrics_by_step(straight)[s]["async/buffered_batches"] for s in range(1, 7)]
    assert max(buffered) == 1  # the admission bound: K + 1 batches generated ahead of the trainer, this one included


@pytest.mark.slow  # 50 s; the default suite keeps the bound without the kill and the K=0 kill -9 resume in two pools
def test_a_slow_trainer_holds_the_rollout_pool_at_the_staleness_bound_across_kill_9(args, tmp_path):
    straight, resumed = run_killed_and_straight(slow_trainer_run(args), tmp_path, SLOW_TRAINER, kill="actor_update:5@1")
    staleness = [metrics_by_step(root)[s]["async/staleness_max"] for root in (straight, resumed) for s in range(1, 7)]
    # the resumed run restarts the rollout pool from the step-3 checkpoint with version 3: batch 4 is fresh
    assert staleness == [0, 1, 1, 1, 1, 1] + [0, 1, 1, 0, 1, 1]
    buffered = [metrics_by_step(straight)[s]["async/buffered_batches"] for s in range(1, 7)]
    assert max(buffered) == 1  # the admission bound: K + 1 batches generated ahead of the trainer, this one included


@pytest.mark.slow  # 40 s; the default suite keeps partial rollout in two pools (below) and the K=0 kill -9 resume
def test_partial_rollout_in_two_pools_carries_prefixes_across_pushes_across_kill_9(args, long_tail_model, tmp_path):
    """K=3, a slow rollout pool (the usual case): the training pool pushes while the rollout pool generates, so
    carried prefixes continue under newer weights. The rollout pool is the one killed."""

    def make(out):
        return args(
            out,
            **{
                "actor_rollout_ref.model.path": str(long_tail_model),
                "async_training.max_staleness": 3,
                "async_training.partial_rollout": True,
                "async_training.oversample_ratio": 2.0,
                "data.max_response_length": 16,
                "trainer.total_training_steps": 6,
                "trainer.save_freq": 3,
                "trainer.test_freq": -1,
            },
        )

    straight, resumed = run_killed_and_straight(make, tmp_path, {"DAGRL_DELAY": "score:1.0"}, kill="score:5@0")
    for root in (straight, resumed):
        records = metrics_by_step(root)
        assert all(records[s]["async/staleness_max"] <= 3 for s in range(1, 7))
    assert max(metrics_by_step(straight)[s]["async/partial_fraction"] for s in range(2, 7)) > 0


@pytest.mark.parametrize("pools", [pytest.param((1, 1), marks=pytest.mark.slow), (2, 1)])  # (2, 1) holds (1, 1)
def test_partial_rollout_in_two_pools_loads_pushes_mid_batch_and_trains_each_prompt_once(
    args, long_tail_model, tmp_path, pools
):
    """A slow decode: pushes arrive while the rollout pool generates a batch; it aborts what is in flight, loads
    them and goes on, so responses carry tokens of several versions, all within the staleness bound. Two rollout
    ranks agree at every scheduling step on when to load (the weights come by a collective)."""
    out = tmp_path / "run"
    # data.seed 2: a prompt order with responses long enough to span a load in pools1 (seed 1's do not)
    ok(
        launch(
            (
                args(
                    out,
                    pools=pools,
                    **{
                        "actor_rollout_ref.model.path": str(long_tail_model),
                        "async_training.max_staleness": 1,
                        "async_training.partial_rollout": True,
                        "async_training.oversample_ratio": 2.0,
                        "data.max_response_length": 16,
                        "trainer.total_training_steps": 5,
                        "trainer.save_freq": -1,
                        "trainer.test_freq": -1,
                        "data.seed": 2,
                    },
                ),
                sum(pools),
                {"DAGRL_DELAY": "rollout_poll:0.1"},
            )
        )[0]
    )
    records = metrics_by_step(out)
    assert sum(records[s]["async/mid_batch_loads"] for s in range(1, 6)) >= 2
    assert max(records[s]["async/partial_fraction"] for s in range(2, 6)) > 0  # tokens of two versions in a row
    assert all(records[s]["async/staleness_max"] <= 1 for s in range(1, 6))
    trained = [json.loads(line)["uid"] for line in (out / LEDGER_FILE).read_text().splitlines() if '"trained@' in line]
    assert len(trained) == len(set(trained)) == 5 * 4
    assert not undocumented_metrics(out), "add these to docs/metrics.md"


def test_a_pool_that_stops_on_an_error_stops_the_other_with_its_message(args, tmp_path):
    reward = tmp_path / "reward.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    raise ValueError('scorer broke')\n"
    )
    out = tmp_path / "broken"
    ((code, stderr),) = launch(
        (args(out, **{"custom_reward_function.path": str(reward), "reward_model.on_error": "raise"}), 2, {})
    )
    assert code != 0
    assert "scorer broke" in stderr and "the rollout pool (rank 0) stopped" in stderr


def test_one_rank_of_a_two_rank_rollout_pool_failing_alone_stops_every_process(args, tmp_path):
    """The other rollout rank is then waiting in a collective and the trainer in the bridge: both stop with the
    failing rank's message instead of waiting for a collective's timeout."""
    reward = tmp_path / "reward.py"
    reward.write_text(
        "import os\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if os.environ['RANK'] == '0':\n"
        "        raise ValueError('scorer broke on one rank')\n"
        "    return 0.0\n"
    )
    out = tmp_path / "broken"
    start = time.monotonic()
    ((code, stderr),) = launch(
        (
            args(out, pools=(2, 1), **{"custom_reward_function.path": str(reward), "reward_model.on_error": "raise"}),
            3,
            {},
        )
    )
    assert code != 0
    assert "scorer broke on one rank" in stderr and "the rollout pool (rank 0) stopped" in stderr
    # far sooner than the collectives' 600 s timeout (actor_rollout_ref.nccl_timeout), which the others would
    # otherwise wait out; the margin is for three processes starting on a loaded machine
    assert time.monotonic() - start < 300
