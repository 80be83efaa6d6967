"""The same seeded run gives the same step-1 update for every actor layout of one world size.

With the hf rollout (rollout TP=1, so rollout DP = world) every layout samples exactly the same responses; the
batch is then moved to the actor layout (dagrl/data/layout.py). Two mini-batches per step, so the second
optimizer step also checks that each global mini-batch holds the same groups whatever the DP size.
"""

from __future__ import annotations

import sys

import pytest

from tests.conftest import cpu_run_overrides
from tests.helpers import metrics_by_step, run_in_session
from tests.engine.engine_helpers import free_port
from tests.trainer.test_end_to_end import REWARD

LAYOUTS = {
    "tp1_dp2": {},
    "tp1_dp2_unbalanced": {"trainer.balance_batch": False},
    "tp2_dp1": {"actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 2},
    "pp2_dp1": {"actor_rollout_ref.actor.megatron.pipeline_model_parallel_size": 2},
    # scored in the background, in the actor layout: both TP ranks score the same rows
    "tp2_dp1_background": {
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 2,
        "reward_model.launch_reward_fn_async": True,
    },
}
COMPARED = (
    "actor/pg_loss",
    "actor/grad_norm",
    "actor/entropy",
    "actor/ppo_kl",
    "actor/pg_clipfrac",
    "critic/score/mean",
    "critic/advantages/mean",
    "response_length/mean",
)


@pytest.mark.slow
def test_step_one_is_the_same_for_dp2_tp2_and_pp2(tiny_model, tiny_data, tmp_path):
    results = {}
    for name, layout in LAYOUTS.items():
        out = tmp_path / name
        args = cpu_run_overrides(
            tiny_model,
            tiny_data,
            out,
            **{
                "trainer.n_gpus_per_node": 2,
                "trainer.total_training_steps": 1,
                "trainer.val_before_train": False,
                "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
                "actor_rollout_ref.rollout.n": 2,
                "data.train_batch_size": 4,
                "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 1,
                "custom_reward_function.path": str(REWARD),
                **layout,
            },
        )
        code, stderr = run_in_session(
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
            env={"OMP_NUM_THREADS": "1"},
        )
        assert code == 0, f"{name}:\n{stderr[-3000:]}"
        results[name] = metrics_by_step(out)[1]
    reference = results["tp1_dp2"]
    assert reference["actor/grad_norm"] > 0 and reference["actor/pg_loss"] != 0
    for name, metrics in results.items():
        for key in COMPARED:
            assert metrics[key] == pytest.approx(reference[key], rel=1e-4, abs=1e-7), (name, key)
