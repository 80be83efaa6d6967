"""Each advantage estimator, policy loss and loss aggregation trains the tiny model for 2 steps on CPU through the
real trainer (`python -m dagrl.main_dag`). Modes are combined so four runs cover them all:

  estimator                      loss     loss_agg_mode
  rloo                           gspo     seq-mean-token-mean      (fast)
  reinforce_plus_plus            cispo    seq-mean-token-sum       (+ adaptive KL in the reward)
  reinforce_plus_plus_baseline   vanilla  seq-mean-token-sum-norm
  grpo                           gspo     token-mean

ppo_epochs=2 makes the second pass see updated weights: its ratios differ from 1, so GSPO/CISPO clip for real,
and a non-zero actor/ppo_kl shows the first optimizer steps changed the weights.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import cpu_run_overrides
from tests.trainer.test_end_to_end import metrics_by_step, train

REWARD = Path(__file__).resolve().parents[1] / "trainer" / "reward_by_length.py"
WHITENED = ("reinforce_plus_plus", "reinforce_plus_plus_baseline")

RUNS = [
    pytest.param("rloo", "gspo", "seq-mean-token-mean", {}, id="rloo-gspo-seq_mean_token_mean"),
    pytest.param(
        "reinforce_plus_plus",
        "cispo",
        "seq-mean-token-sum",
        {"algorithm.use_kl_in_reward": True, "algorithm.kl_ctrl.type": "adaptive", "algorithm.gamma": 0.99},
        id="reinforce_pp-cispo-seq_mean_token_sum",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        "reinforce_plus_plus_baseline",
        "vanilla",
        "seq-mean-token-sum-norm",
        {"actor_rollout_ref.actor.loss_scale_factor": 4},
        id="reinforce_pp_baseline-vanilla-seq_mean_token_sum_norm",
        marks=pytest.mark.slow,
    ),
    pytest.param("grpo", "gspo", "token-mean", {}, id="grpo-gspo-token_mean", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("estimator,loss_mode,agg_mode,extra", RUNS)
def test_algorithm_trains_two_steps(tiny_model, tiny_data, tmp_path, estimator, loss_mode, agg_mode, extra):
    out = tmp_path / "run"
    train(
        cpu_run_overrides(
            tiny_model,
            tiny_data,
            out,
            **{
                "algorithm.adv_estimator": estimator,
                "actor_rollout_ref.actor.policy_loss.loss_mode": loss_mode,
                "actor_rollout_ref.actor.loss_agg_mode": agg_mode,
                "actor_rollout_ref.actor.ppo_epochs": 2,
                "custom_reward_function.path": str(REWARD),
                "trainer.val_before_train": False,
                "trainer.test_freq": -1,
                **extra,
            },
        )
    )
    records = metrics_by_step(out)
    assert sorted(records) == [1, 2]
    for step in (1, 2):
        metrics = records[step]
        assert math.isfinite(metrics["actor/pg_loss"]), metrics
        assert metrics["actor/grad_norm"] > 0 and math.isfinite(metrics["actor/grad_norm"])
        assert metrics["actor/skipped_steps"] == 0.0
        # the second epoch's log-probs differ from the old ones: the optimizer steps changed the weights
        assert abs(metrics["actor/ppo_kl"]) > 1e-6, metrics
        assert metrics["critic/advantages/max"] > metrics["critic/advantages/min"]  # the reward gave a signal
        if estimator in WHITENED:  # whitened over the batch's response tokens
            assert abs(metrics["critic/advantages/mean"]) < 1e-5
    if extra.get("algorithm.use_kl_in_reward"):
        assert records[2]["actor/reward_kl_penalty_coeff"] != records[1]["actor/reward_kl_penalty_coeff"]


def test_off_policy_correction_trains_two_steps(tiny_model, tiny_data, tmp_path):
    """Decoupled PPO and sequence masking through the real trainer: partial rollout brings the behaviour log-probs
    (the HF engine's, at the sampling temperature) and the old-log-prob pass pi_prox."""
    out = tmp_path / "run"
    train(
        cpu_run_overrides(
            tiny_model,
            tiny_data,
            out,
            **{
                "async_training.partial_rollout": True,
                "actor_rollout_ref.actor.policy_loss.off_policy": "decoupled",
                "actor_rollout_ref.actor.mis_ratio_low": 0.9,
                "actor_rollout_ref.actor.mis_ratio_high": 1.1,
                "actor_rollout_ref.actor.ppo_epochs": 2,
                "custom_reward_function.path": str(REWARD),
                "trainer.val_before_train": False,
                "trainer.test_freq": -1,
            },
        )
    )
    records = metrics_by_step(out)
    assert sorted(records) == [1, 2]
    for metrics in records.values():
        assert metrics["actor/grad_norm"] > 0 and math.isfinite(metrics["actor/pg_loss"]), metrics
        assert 0 <= metrics["actor/mis_masked_fraction"] < 1
        # E_behav[pi_prox / pi_behav] = 1: the sampled tokens' mean weight is near it
        assert metrics["actor/behav_imp_weight/mean"] == pytest.approx(1.0, abs=0.25)
        assert 0 <= metrics["actor/behav_imp_weight_capped_fraction"] < 1


def test_remax_scores_a_greedy_response_per_prompt_as_its_baseline(tiny_model, tiny_data, tmp_path):
    """remax on one response per prompt: the rollout node also generates each prompt's greedy response in the same
    session and scores it; the advantage is the return minus that score."""
    from tests.helpers import undocumented_metrics

    out = tmp_path / "run"
    train(
        cpu_run_overrides(
            tiny_model,
            tiny_data,
            out,
            **{
                "algorithm.adv_estimator": "remax",
                "actor_rollout_ref.rollout.n": 1,
                "custom_reward_function.path": str(REWARD),
                "trainer.val_before_train": False,
                "trainer.test_freq": -1,
            },
        )
    )
    records = metrics_by_step(out)
    assert sorted(records) == [1, 2]
    for metrics in records.values():
        assert math.isfinite(metrics["critic/reward_baseline/mean"])
        # returns to go minus a per-prompt baseline: not centred like grpo's
        assert metrics["critic/advantages/max"] > metrics["critic/advantages/min"]
        assert metrics["actor/grad_norm"] > 0
    assert not undocumented_metrics(out)
