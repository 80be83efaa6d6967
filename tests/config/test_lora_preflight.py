"""Pre-flight of actor_rollout_ref.model.lora's adapter-only sync: refused with a rollout that cannot load adapters."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dagrl.config.errors import ConfigError
from dagrl.config.preflight.lora import check_lora, rollout_takes_adapters
from dagrl.engine.rollout.registry import ROLLOUT_ENGINES


class AdapterRollout:
    supports_adapter = True


def build():  # the registered builder (never called here)
    raise AssertionError


def cfg(rollout: str, merge: bool, hybrid: bool = True):
    lora = SimpleNamespace(rank=8, target_modules=["linear_qkv"], merge=merge)
    model = SimpleNamespace(lora=lora, trainable_top_layers=None)
    return SimpleNamespace(
        actor_rollout_ref=SimpleNamespace(model=model, rollout=SimpleNamespace(name=rollout), hybrid_engine=hybrid)
    )


@pytest.fixture
def engines():
    ROLLOUT_ENGINES.register("adapters_yes", f"{__name__}:build", "test engine with load_adapter")
    ROLLOUT_ENGINES.register("adapters_no", "dagrl.config.preflight.lora:check_lora", "a module with no engine class")
    yield
    ROLLOUT_ENGINES.unregister("adapters_yes")
    ROLLOUT_ENGINES.unregister("adapters_no")


def test_adapter_only_sync_needs_a_rollout_that_takes_adapters(engines):
    hf = {"hidden_size": 64}
    assert rollout_takes_adapters("adapters_yes") and not rollout_takes_adapters("adapters_no")
    check_lora(cfg("adapters_yes", merge=False), hf)
    check_lora(cfg("adapters_no", merge=True), hf)  # merged sync: any rollout
    with pytest.raises(ConfigError, match="cannot load"):
        check_lora(cfg("adapters_no", merge=False), hf)
    with pytest.raises(ConfigError, match="hybrid_engine=false"):
        check_lora(cfg("adapters_yes", merge=False, hybrid=False), hf)
    moe = cfg("adapters_yes", merge=True)
    moe.actor_rollout_ref.model.lora.target_modules = ["q_proj", "down_proj"]
    with pytest.raises(ConfigError, match="MoE"):
        check_lora(moe, {"num_experts": 8, "hidden_size": 64})
