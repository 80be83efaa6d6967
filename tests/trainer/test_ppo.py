"""PPO with a critic on CPU (dag=ppo, gae): the critic warms up alone, learns, is checkpointed beside the actor (with
LoRA: its adapters and value head only), and a kill -9 and relaunch reproduce an uninterrupted run exactly."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dagrl.config.load import compose
from dagrl.config.tree import leaf_keys
from tests.conftest import cpu_run_overrides
from tests.helpers import metrics_by_step, run_in_session
from tests.trainer.test_end_to_end import REWARD, train

CRITIC_LR = 2e-3
CRITIC_LORA = {
    "critic.model.lora.rank": 4,
    "critic.model.lora.alpha": 8,
    "critic.model.lora.dropout": 0.1,
    "critic.model.lora.target_modules": "[q_proj,k_proj,v_proj,o_proj,linear_fc1,linear_fc2]",
}


@pytest.fixture(scope="module")
def ppo_args(tiny_model, tiny_data):
    def make(out: Path, **extra) -> list[str]:
        return cpu_run_overrides(
            tiny_model,
            tiny_data,
            out,
            **{
                "dag": "ppo",
                "algorithm.adv_estimator": "gae",
                "algorithm.lam": 0.95,
                "custom_reward_function.path": str(REWARD),
                "trainer.critic_warmup": 1,
                "trainer.val_before_train": False,
                "critic.optim.lr": CRITIC_LR,
                "critic.ppo_epochs": 2,
                "critic.ppo_mini_batch_size": 4,
                "critic.ppo_micro_batch_size_per_gpu": 4,
                "critic.forward_micro_batch_size_per_gpu": 3,
                **extra,
            },
        )

    return make


def test_ppo_warms_up_the_critic_then_trains_both(ppo_args, tmp_path):
    out, reads = tmp_path / "ppo", tmp_path / "reads.json"
    train(
        ppo_args(out, **{"trainer.total_training_steps": 2, "trainer.save_freq": 2}),
        {"DAGRL_RECORD_CONFIG_READS": str(reads)},
    )
    records = metrics_by_step(out)
    first, second = records[1], records[2]
    # step 1 is critic warmup: no actor update; step 2 updates both
    assert "actor/pg_loss" not in first and "actor/grad_norm" not in first
    assert second["actor/grad_norm"] > 0 and second["actor/lr"] == pytest.approx(1e-3)
    for step in (first, second):
        assert step["critic/lr"] == pytest.approx(CRITIC_LR) and step["critic/grad_norm"] > 0
        assert 0.0 <= step["critic/vf_clipfrac"] <= 1.0
    # the critic learns: its predictions move within an update (2 epochs) and its loss falls from a random head
    assert abs(first["critic/vpred_mean"] - first["critic/values/mean"]) > 1e-3
    assert second["critic/vf_loss"] < first["critic/vf_loss"]
    assert (out / "global_step_2" / "critic").is_dir() and (out / "global_step_2" / "actor").is_dir()
    # no dead critic.* key: a PPO run reads every one (tests/trainer/test_end_to_end.py checks the others on GRPO)
    read = set(json.loads(reads.read_text()))
    assert not unread_critic_keys(read, skip=frozenset(CRITIC_LORA)), "critic keys a PPO run does not read"
    assert {"algorithm.gamma", "algorithm.lam"} <= read  # GAE's: the GRPO run's dead-key test leaves them to this one


def unread_critic_keys(read: set[str], skip: frozenset[str] = frozenset()) -> list[str]:
    """critic.* keys of conf/ that none of `read` is or lies under (`skip`: those another run of the suite reads)."""
    return sorted(
        key
        for key in leaf_keys(compose([]))
        if key.startswith("critic.")
        and key not in skip
        and key not in read
        and not any(r.startswith(key + ".") for r in read)
    )


def test_ppo_with_critic_lora_checkpoints_the_adapters_and_the_value_head_only(ppo_args, tmp_path):
    from megatron.core import dist_checkpointing

    out, reads = tmp_path / "ppo_lora", tmp_path / "reads.json"
    overrides = {"trainer.total_training_steps": 2, "trainer.save_freq": 2, **CRITIC_LORA}
    train(ppo_args(out, **overrides), {"DAGRL_RECORD_CONFIG_READS": str(reads)})
    records = metrics_by_step(out)
    first, second = records[1], records[2]
    assert first["critic/grad_norm"] > 0 and second["critic/grad_norm"] > 0 and second["actor/grad_norm"] > 0
    assert abs(first["critic/vpred_mean"] - first["critic/values/mean"]) > 1e-3  # the adapters and head moved
    saved = dist_checkpointing.load_tensors_metadata(str(out / "global_step_2" / "critic"))
    model_keys = {k for k in saved if not k.startswith("optimizer")}
    assert {k for k in model_keys if not k.endswith(("lora_A", "lora_B"))} == {
        "output_layer.weight",
        "output_layer.bias",
    }
    assert len(model_keys) == 4 * 2 + 2  # 4 linears, A and B each (stacked over layers), and the head
    assert not unread_critic_keys(set(json.loads(reads.read_text()))), "critic keys a critic LoRA run does not read"


def test_ppo_without_gae_or_with_warmup_but_no_critic_is_rejected(ppo_args, tmp_path):
    code, stderr = run_in_session(
        [sys.executable, "-m", "dagrl.main_dag", *ppo_args(tmp_path / "a", **{"algorithm.adv_estimator": "grpo"})]
    )
    assert code == 2 and "algorithm.adv_estimator=gae" in stderr
    code, stderr = run_in_session(
        [
            sys.executable,
            "-m",
            "dagrl.main_dag",
            *ppo_args(tmp_path / "b", dag="grpo", **{"algorithm.adv_estimator": "grpo"}),
        ]
    )
    assert code == 2 and "trainer.critic_warmup=1" in stderr


@pytest.mark.slow
@pytest.mark.parametrize("critic_lora", [{}, CRITIC_LORA], ids=["full", "critic_lora"])
def test_ppo_kill_and_resume_matches_uninterrupted_run(ppo_args, tmp_path, critic_lora):
    extra = {"trainer.total_training_steps": 3, "trainer.save_freq": 2, "trainer.test_freq": 3, **critic_lora}
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(ppo_args(straight, **extra))
    train(ppo_args(resumed, **extra), env={"DAGRL_FAULT": "critic_update:3"}, expect_kill=True)
    assert sorted(p.name for p in resumed.glob("global_step_*")) == ["global_step_2"]
    train(ppo_args(resumed, **extra))
    expected, actual = metrics_by_step(straight), metrics_by_step(resumed)
    assert sorted(expected) == [1, 2, 3] and "critic/vf_loss" in expected[3] and "actor/pg_loss" in expected[3]
    assert actual == expected  # bit-identical: critic and actor losses, grad norms, values, validation
