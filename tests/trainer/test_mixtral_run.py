"""A Mixtral GRPO run on CPU in one process with the hf rollout: the actor exports Mixtral's checkpoint names
(block_sparse_moe.experts.{e}.w1/w3/w2, block_sparse_moe.gate), which the rollout's fused expert tensors and router
take at every weight sync (tests/tools/test_upcycle.py checks one sync tensor by tensor)."""

from __future__ import annotations

import json
import math
import sys

from tests.conftest import cpu_run_overrides, make_tiny_model_dir
from tests.helpers import metrics_by_step, run_in_session
from tests.trainer.test_end_to_end import REWARD


def test_mixtral_grpo_trains_and_the_rollout_samples_with_the_updated_experts(tiny_data, tmp_path):
    model, out = make_tiny_model_dir(tmp_path / "model", family="mixtral"), tmp_path / "run"
    overrides = cpu_run_overrides(
        model,
        tiny_data,
        out,
        **{
            "actor_rollout_ref.rollout.name": "hf",
            "custom_reward_function.path": str(REWARD),
            "trainer.val_before_train": False,
            "trainer.save_freq": -1,
        },
    )
    code, stderr = run_in_session([sys.executable, "-m", "dagrl.main_dag", *overrides], {"OMP_NUM_THREADS": "1"})
    assert code == 0, stderr[-3000:]
    metrics = metrics_by_step(out)
    assert sorted(metrics) == [1, 2], metrics
    for step in (1, 2):
        assert math.isfinite(metrics[step]["actor/grad_norm"]) and metrics[step]["actor/grad_norm"] > 0
    syncs = {row["step"]: row.get("perf/weight_sync_gb", 0) for row in map(json.loads, (out / "metrics.jsonl").open())}
    # step 2 samples with step 1's update: every tensor went across (the hf rollout refuses a name it has not, and
    # a sync that leaves one of its tensors stale)
    assert syncs[2] > 0
