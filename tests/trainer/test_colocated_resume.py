"""A colocated rollout engine sleeps from its construction until the first rollout wakes it, so that a resume's
checkpoint load has the engine's memory: on one H100 a Qwen3-1.7B resume beside an awake vLLM at
gpu_memory_utilization=0.5 ran out of memory loading the optimizer state. Around each rollout the
actor's state goes to the host (rollout.offload_train_state), or stays (false) and trains to the same numbers."""

import json
import sys
from pathlib import Path

from tests.conftest import cpu_run_overrides
from tests.helpers import run_concurrently

RECORDER = Path(__file__).with_name("colocated_events.py")


def run_recording(*runs: tuple[Path, list[str]]) -> list[list[str]]:
    """The events each (events file, overrides) run records; several runs go side by side, each on one thread (two
    fit the two cores, and runs that are compared compute alike)."""
    env = {"OMP_NUM_THREADS": "1"} if len(runs) > 1 else {}
    results = run_concurrently(
        [([sys.executable, str(RECORDER), str(events), *overrides], env) for events, overrides in runs], timeout=300
    )
    for code, stderr in results:
        assert code == 0, stderr[-3000:]
    return [events.read_text().split() for events, _ in runs]


def test_engine_sleeps_before_the_checkpoint_loads_and_wakes_for_each_rollout(tmp_path, tiny_model, tiny_data):
    out = tmp_path / "run"
    (fresh,) = run_recording(
        (
            tmp_path / "fresh",
            cpu_run_overrides(
                tiny_model,
                tiny_data,
                out,
                **{"trainer.total_training_steps": 1, "trainer.val_before_train": False, "trainer.save_freq": 1},
            ),
        )
    )
    # asleep from the start; each rollout: grads and optimizer out, wake the weights (then sync), params out, wake the
    # cache, sleep again
    assert fresh == [
        "sleep",
        "offload_grads",
        "offload_optimizer",
        "wake_weights",
        "offload_params",
        "wake_cache",
        "sleep",
    ]
    (resumed,) = run_recording(
        (
            tmp_path / "resumed",
            cpu_run_overrides(
                tiny_model,
                tiny_data,
                out,
                **{"trainer.total_training_steps": 2, "trainer.val_before_train": False, "trainer.save_freq": 1},
            ),
        )
    )
    assert resumed[:2] == ["sleep", "load_checkpoint"], resumed
    assert resumed[2:] == [
        "offload_grads",
        "offload_optimizer",
        "wake_weights",
        "offload_params",
        "wake_cache",
        "sleep",
    ]


def step_metrics(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [
        {k: v for k, v in row.items() if k != "time" and not k.startswith(("timing", "perf/", "memory/"))}
        for row in rows
    ]


def test_offload_train_state_false_keeps_the_actor_in_place_and_trains_the_same(tmp_path, tiny_model, tiny_data):
    offloaded, in_place = run_recording(
        *[
            (
                tmp_path / f"events_{offload}",
                cpu_run_overrides(
                    tiny_model,
                    tiny_data,
                    tmp_path / f"offload_{offload}",
                    **{
                        "trainer.total_training_steps": 2,
                        "trainer.val_before_train": False,
                        "trainer.save_freq": -1,
                        "actor_rollout_ref.rollout.offload_train_state": offload,
                    },
                ),
            )
            for offload in (True, False)
        ]
    )
    assert offloaded.count("offload_params") == 2 and offloaded.count("offload_optimizer") == 2, offloaded
    # nothing leaves the device around either rollout (the *_offload flags are off)
    assert in_place == ["sleep"] + ["wake_weights", "wake_cache", "sleep"] * 2, in_place
    runs = {offload: step_metrics(tmp_path / f"offload_{offload}") for offload in (True, False)}
    assert len(runs[True]) == 2 and runs[True] == runs[False]
