"""vLLM's tensor parallelism against the model's heads, checked in pre-flight (a GPU run found it only after the actor
was built: SmolLM2-135M has 9 query and 3 KV heads, so rollout TP=2 cannot run)."""

from __future__ import annotations

import pytest

from dagrl.config.errors import ConfigError
from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.config.preflight.rollout import check_rollout_heads

KEY = "actor_rollout_ref.rollout.tensor_model_parallel_size"
SMOLLM2 = {"num_attention_heads": 9, "num_key_value_heads": 3}


def refusal(name: str, tp: int, hf_config: dict) -> str | None:
    try:
        check_rollout_heads(Cfg(compose([f"actor_rollout_ref.rollout.name={name}"])), tp, hf_config)
    except ConfigError as error:
        return str(error)
    return None


@pytest.mark.parametrize("tp", [1, 3, 9])
def test_a_tp_vllm_can_split_passes(tp):
    assert refusal("vllm", tp, SMOLLM2) is None


def test_a_tp_that_does_not_divide_the_heads_names_the_key_and_the_sizes_that_work():
    message = refusal("vllm", 2, SMOLLM2)
    assert message is not None and f"{KEY}=2" in message and "num_attention_heads=9" in message
    assert "pick one of 1, 3, 9" in message


def test_fewer_kv_heads_than_the_tp_are_replicated_when_the_tp_is_their_multiple():
    assert refusal("vllm", 8, {"num_attention_heads": 32, "num_key_value_heads": 4}) is None  # 4 KV heads, 2 each
    message = refusal("vllm", 8, {"num_attention_heads": 32, "num_key_value_heads": 12})  # 12 % 8, 8 % 12 both != 0
    assert message is not None and "num_key_value_heads=12" in message and "pick one of 1, 2, 4" in message


def test_the_hf_rollout_has_its_own_tp_rule():
    assert refusal("hf", 2, SMOLLM2) is None  # check_rollout_tp already refuses any hf TP > 1
