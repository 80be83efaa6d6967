"""actor_rollout_ref.actor.megatron.use_deterministic_algorithms: the launch environment and torch's flag in the
launched process, the engine's TransformerConfig, and a seeded CPU run with it on that repeats."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from dagrl.config.errors import ConfigError
from dagrl.config.launch_env import DETERMINISTIC_ENV, apply_determinism
from dagrl.config.megatron_fields import DETERMINISTIC
from tests.conftest import cpu_run_overrides
from tests.helpers import metrics_by_step
from tests.trainer.test_end_to_end import train_together

RECORDING_REWARD = Path(__file__).with_name("recording_reward.py")
SWITCH = "actor_rollout_ref.actor.megatron.use_deterministic_algorithms"


@pytest.fixture
def torch_flag():
    """Leaves torch's process-wide flag as it found it."""
    before = torch.are_deterministic_algorithms_enabled()
    yield
    torch.use_deterministic_algorithms(before)


def test_the_switch_sets_the_environment_and_torchs_flag(monkeypatch, torch_flag):
    for name in DETERMINISTIC_ENV:
        monkeypatch.delenv(name, raising=False)
    apply_determinism(False)
    assert (
        not any(name in os.environ for name in DETERMINISTIC_ENV) and not torch.are_deterministic_algorithms_enabled()
    )
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")  # a deterministic value already set is kept
    apply_determinism(True)
    assert {name: os.environ[name] for name in DETERMINISTIC_ENV} == {
        "CUBLAS_WORKSPACE_CONFIG": ":16:8",
        "NCCL_ALGO": "Ring",
        "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0",
    }
    assert torch.are_deterministic_algorithms_enabled()
    monkeypatch.setenv("NVTE_ALLOW_NONDETERMINISTIC_ALGO", "1")
    with pytest.raises(ConfigError, match="NVTE_ALLOW_NONDETERMINISTIC_ALGO='1' is not deterministic"):
        apply_determinism(True)


def test_the_engine_config_follows_torchs_flag(tiny_model, torch_flag):
    from transformers import AutoConfig

    from dagrl.engine.megatron.hf_config import transformer_config
    from dagrl.placement import ParallelLayout

    def build():
        hf_config = AutoConfig.from_pretrained(tiny_model)
        config = transformer_config(hf_config, ParallelLayout(), torch.float32, on_gpu=False)
        return {name: getattr(config, name) for name in DETERMINISTIC}

    torch.use_deterministic_algorithms(False)
    assert build()["deterministic_mode"] is False
    torch.use_deterministic_algorithms(True)
    assert build() == DETERMINISTIC


def test_a_deterministic_run_holds_the_switch_in_every_process(tiny_model, tiny_data, tmp_path, monkeypatch):
    """A seeded run with the switch on: the launched process holds the environment, torch's flag and deterministic
    TransformerConfigs, and trains. (A seeded CPU run repeats with or without it: the repeat on a GPU is the
    switch's proof.)"""
    for variable in DETERMINISTIC_ENV:  # the launched processes set them themselves
        monkeypatch.delenv(variable, raising=False)
    overrides = cpu_run_overrides(
        tiny_model,
        tiny_data,
        tmp_path / "run",
        **{
            SWITCH: "true",
            "custom_reward_function.path": str(RECORDING_REWARD),
            "trainer.val_before_train": False,
            "trainer.save_freq": -1,
        },
    )
    train_together((overrides, {"DAGRL_TEST_RECORD": str(tmp_path / "record.json")}, False))
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["env"] == {
        "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "NCCL_ALGO": "Ring",
        "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0",
    }
    assert record["torch"] is True
    assert record["configs"] and all(config == DETERMINISTIC for config in record["configs"])
    assert sorted(metrics_by_step(tmp_path / "run")) == [1, 2]
