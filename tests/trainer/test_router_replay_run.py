"""GRPO on a tiny qwen3_moe with the hf rollout and routing replay, one process: the rollout's routes (R3) or the
old-log-prob pass's (R2) reach the actor's update through the reshard and the micro-batches."""

from __future__ import annotations

import math

import pytest

from tests.conftest import cpu_run_overrides, make_tiny_model_dir
from tests.helpers import metrics_by_step, undocumented_metrics
from tests.trainer.test_end_to_end import REWARD, train_together

AGREEMENT = "actor/routing_agreement"


@pytest.mark.slow  # three runs; the tie-heavy pair below runs R3 end to end in the default suite
def test_grpo_with_r3_and_r2_replays_the_routes_where_they_were_taken(tiny_data, tmp_path):
    """In fp32 the rollout and the actor route every token alike, so replaying the rollout's routes (or the
    old-log-prob pass's) must give the run without replay bit for bit: a route that reached the wrong token or layer
    would change the numbers."""
    model = make_tiny_model_dir(tmp_path / "model", family="qwen3_moe")
    common = {
        "custom_reward_function.path": str(REWARD),
        "trainer.val_before_train": False,
        "trainer.save_freq": -1,
        # one optimizer step per batch (a second one would route by updated weights, which R3 does not follow) and
        # the old-log-prob pass still run
        "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
    }
    record = "actor_rollout_ref.rollout.enable_rollout_routing_replay"
    runs = {
        "plain": {},
        "r3": {record: True, "actor_rollout_ref.actor.router_replay.mode": "R3"},
        "r2": {"actor_rollout_ref.actor.router_replay.mode": "R2"},  # the old-log-prob pass's routes, no rollout's
    }
    train_together(
        *[
            (cpu_run_overrides(model, tiny_data, tmp_path / name, **common, **extra), {}, False)
            for name, extra in runs.items()
        ]
    )
    plain, r3, r2 = (metrics_by_step(tmp_path / name) for name in runs)
    assert sorted(r3) == [1, 2]
    for step in (1, 2):
        assert AGREEMENT not in plain[step]
        assert {k: v for k, v in r3[step].items() if k != AGREEMENT} == plain[step]
        assert r3[step][AGREEMENT] == 1.0  # the actor's own choice at the replayed inputs
        assert r2[step] == plain[step]  # no rollout routes to compare with: no agreement
        assert math.isfinite(r3[step]["actor/grad_norm"]) and r3[step]["actor/grad_norm"] > 0
    assert not undocumented_metrics(*(tmp_path / name for name in runs))


def test_a_tie_heavy_router_disagrees_and_r3_narrows_the_rollout_log_prob_gap(tiny_data, tmp_path):
    """A bf16 rollout of a router whose rows are equal up to tiny noise: without replay the fp32 actor routes some
    tokens elsewhere (agreement < 1); with R3 the same rollout (step 1 samples alike) is closer to the actor."""
    from tests.engine.tiny_models import tie_router_weights

    model = tie_router_weights(make_tiny_model_dir(tmp_path / "model", family="qwen3_moe"))
    common = {
        "custom_reward_function.path": str(REWARD),
        "trainer.val_before_train": False,
        "trainer.save_freq": -1,
        "trainer.total_training_steps": 1,
        "actor_rollout_ref.rollout.dtype": "bfloat16",
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.rollout.enable_rollout_routing_replay": True,
    }
    runs = {"disabled": {}, "r3": {"actor_rollout_ref.actor.router_replay.mode": "R3"}}
    train_together(
        *[
            (cpu_run_overrides(model, tiny_data, tmp_path / name, **common, **extra), {}, False)
            for name, extra in runs.items()
        ]
    )
    disabled, r3 = (metrics_by_step(tmp_path / name)[1] for name in runs)
    assert disabled[AGREEMENT] < 1
    gap = "training/rollout_log_probs_diff_mean"
    assert r3[gap] < disabled[gap]
    assert disabled["response_length/mean"] == r3["response_length/mean"]  # the same rollout


@pytest.mark.slow  # two 2-process runs; the engine world checks replay at PP2 and TP2+SP in the default suite
def test_r3_at_ep2_over_two_processes_moves_the_routes_with_their_rows(tiny_data, tmp_path):
    """DP2 x EP2: the reshard deals rows (and their routes) between the ranks; in fp32 R3 must give the run without
    replay bit for bit (a route left behind or paired with another row would change the numbers)."""
    from tests.helpers import run_concurrently
    from tests.reliability.test_self_healing import torchrun

    model = make_tiny_model_dir(tmp_path / "model", family="qwen3_moe")
    common = {
        "custom_reward_function.path": str(REWARD),
        "trainer.val_before_train": False,
        "trainer.save_freq": -1,
        "trainer.n_gpus_per_node": 2,
        "trainer.balance_batch": True,
        "actor_rollout_ref.actor.megatron.expert_model_parallel_size": 2,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
    }
    runs = {
        "plain": {},
        "r3": {
            "actor_rollout_ref.rollout.enable_rollout_routing_replay": True,
            "actor_rollout_ref.actor.router_replay.mode": "R3",
        },
    }
    results = run_concurrently(
        [
            (
                torchrun(cpu_run_overrides(model, tiny_data, tmp_path / name, **common, **extra)),
                {"OMP_NUM_THREADS": "1"},
            )
            for name, extra in runs.items()
        ]
    )
    for code, stderr in results:
        assert code == 0, stderr[-3000:]
    plain, r3 = (metrics_by_step(tmp_path / name) for name in runs)
    assert sorted(r3) == [1, 2]
    for step in (1, 2):
        assert r3[step].pop(AGREEMENT) == 1.0
        assert r3[step] == plain[step]
