"""GRPO on a tiny qwen3_moe with the hf rollout and routing replay, one process: the rollout's routes (R3) or the
old-log-prob pass's (R2) reach the actor's update through the reshard and the micro-batches."""

from __future__ import annotations

import math

from tests.conftest import cpu_run_overrides, make_tiny_model_dir
from tests.helpers import metrics_by_step, undocumented_metrics
from tests.trainer.test_end_to_end import REWARD, train_together

AGREEMENT = "actor/routing_agreement"


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
