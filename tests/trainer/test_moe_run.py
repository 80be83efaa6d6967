"""A mixture-of-experts GRPO run on CPU: a tiny qwen3_moe at EP2 over two processes with the hf rollout, whose fused
expert tensors (transformers >= 5) take the actor's per-expert export at every weight sync."""

from __future__ import annotations

import json
import math

from tests.conftest import cpu_run_overrides, make_tiny_model_dir
from tests.helpers import metrics_by_step, run_in_session
from tests.reliability.test_self_healing import torchrun
from tests.trainer.test_end_to_end import REWARD


def test_moe_grpo_at_ep2_trains_and_syncs_the_experts_to_the_rollout(tiny_data, tmp_path):
    model, out = make_tiny_model_dir(tmp_path / "model", family="qwen3_moe"), tmp_path / "run"
    code, stderr = run_in_session(
        torchrun(
            cpu_run_overrides(
                model,
                tiny_data,
                out,
                **{
                    "trainer.n_gpus_per_node": 2,
                    "actor_rollout_ref.actor.megatron.expert_model_parallel_size": 2,
                    "custom_reward_function.path": str(REWARD),
                    "trainer.val_before_train": False,
                    "trainer.save_freq": -1,
                },
            )
        ),
        {"OMP_NUM_THREADS": "1"},
    )
    assert code == 0, stderr[-3000:]
    metrics = metrics_by_step(out)
    assert sorted(metrics) == [1, 2], metrics
    for step in (1, 2):
        assert math.isfinite(metrics[step]["actor/grad_norm"]) and metrics[step]["actor/grad_norm"] > 0
    syncs = {row["step"]: row.get("perf/weight_sync_gb", 0) for row in map(json.loads, (out / "metrics.jsonl").open())}
    assert syncs[2] > 0  # step 2 samples with step 1's update: the experts went across
