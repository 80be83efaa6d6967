"""Unit tests of the pre-flight checks for mistyped and misplaced inputs: megatron's TransformerConfig
fields read from source, the rank variables of the launch, unknown keys answered without a misleading key."""

from __future__ import annotations

import dataclasses

import pytest

from dagrl.config.errors import ConfigError
from dagrl.config.launch_env import check_rank_variables
from dagrl.config.load import closest_key, section_keys
from dagrl.config.megatron_fields import transformer_config_fields
from dagrl.config.schema.check import default_config


def test_transformer_config_fields_from_source_match_the_dataclass():
    from megatron.core.transformer import TransformerConfig

    assert transformer_config_fields() == {field.name for field in dataclasses.fields(TransformerConfig)}


@pytest.mark.parametrize(
    "env, key",
    [
        ({"RANK": "1"}, "RANK"),
        ({"RANK": "-1"}, "RANK"),
        ({"RANK": "x"}, "RANK"),
        ({"LOCAL_RANK": "3"}, "LOCAL_RANK"),
        ({"LOCAL_WORLD_SIZE": "4"}, "LOCAL_WORLD_SIZE"),
        ({"MASTER_PORT": "abc"}, "MASTER_PORT"),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT"),
    ],
)
def test_rank_variables_outside_the_launch_are_refused(monkeypatch, env, key):
    for name in ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as error:
        check_rank_variables(1)
    assert error.value.key == key


def test_rank_variables_of_a_torchrun_launch_pass(monkeypatch):
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setenv("MASTER_PORT", "29500")
    check_rank_variables(8)


def test_unknown_keys_get_a_near_key_or_their_section_not_a_neighbour():
    tree = default_config()
    assert closest_key("trainer.totl_epochs", tree) == "trainer.total_epochs"
    assert closest_key("actor_rollout_ref.rolout.temperature", tree) == "actor_rollout_ref.rollout.temperature"
    assert closest_key("actor_rollout_ref.model.use_shm", tree) is None  # was model.path
    assert section_keys("dag.workflow_path", tree) == "; dag has: custom_pipeline_fn, nodes, switches"
