"""Pre-flight of actor_rollout_ref.model.lora's adapter-only sync (refused with a rollout that cannot load adapters),
and of critic.model.lora: the adapter rules against the critic's model, its keys, and rank 0 building no adapter."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dagrl.config.errors import ConfigError
from dagrl.config.preflight.lora import check_lora
from dagrl.engine.rollout.registry import ROLLOUT_ENGINES, engine_declares


class AdapterRollout:
    supports_adapter = True


def build():  # the registered builder (never called here)
    raise AssertionError


class Node(SimpleNamespace):  # read by attribute and by key, as a config is
    def __getitem__(self, name):
        return getattr(self, name)


def cfg(rollout: str, merge: bool, hybrid: bool = True, overrides: dict | None = None):
    lora = Node(rank=8, target_modules=["linear_qkv"], merge=merge)
    model = Node(lora=lora, trainable_top_layers=None)
    actor = Node(megatron=Node(override_transformer_config=overrides or {}))
    return Node(actor_rollout_ref=Node(model=model, actor=actor, rollout=Node(name=rollout), hybrid_engine=hybrid))


@pytest.fixture
def engines():
    ROLLOUT_ENGINES.register("adapters_yes", f"{__name__}:build", "test engine with load_adapter")
    ROLLOUT_ENGINES.register("adapters_no", "dagrl.config.preflight.lora:check_lora", "a module with no engine class")
    yield
    ROLLOUT_ENGINES.unregister("adapters_yes")
    ROLLOUT_ENGINES.unregister("adapters_no")


def test_adapter_only_sync_needs_a_rollout_that_takes_adapters(engines):
    hf = {"hidden_size": 64}
    assert engine_declares("adapters_yes", "supports_adapter") and not engine_declares(
        "adapters_no", "supports_adapter"
    )
    check_lora(cfg("adapters_yes", merge=False), hf)
    check_lora(cfg("adapters_no", merge=True), hf)  # merged sync: any rollout
    with pytest.raises(ConfigError, match="cannot load"):
        check_lora(cfg("adapters_no", merge=False), hf)
    with pytest.raises(ConfigError, match="hybrid_engine=false"):
        check_lora(cfg("adapters_yes", merge=False, hybrid=False), hf)
    with pytest.raises(ConfigError, match=r"merge=true runs the actor's linears on merged weights.*set actor_rollout"):
        check_lora(cfg("adapters_no", merge=True, overrides={"fp8": "e4m3"}), hf)
    check_lora(cfg("adapters_yes", merge=False, overrides={"fp8": "e4m3"}), hf)  # adapter-only: the base W in FP8
    with pytest.raises(ConfigError, match="the hf rollout merging the adapter it loads .* use the vllm rollout"):
        check_lora(cfg("hf", merge=False, overrides={"fp8": "e4m3"}), hf)  # hf serves the merge: the actor too
    moe = cfg("adapters_yes", merge=True)
    moe.actor_rollout_ref.model.lora.target_modules = ["q_proj", "down_proj"]
    with pytest.raises(ConfigError, match="MoE"):
        check_lora(moe, {"num_experts": 8, "hidden_size": 64})


def critic_cfg(rank: int, targets: list, path: str | None = None):
    lora = SimpleNamespace(rank=rank, target_modules=targets)
    return SimpleNamespace(critic=SimpleNamespace(model=SimpleNamespace(lora=lora, path=path)))


def test_critic_lora_takes_the_adapter_rules_against_its_own_model(tmp_path):
    import json

    from dagrl.config.preflight.lora import check_critic_lora

    hf = {"hidden_size": 64}
    check_critic_lora(critic_cfg(0, ["nonsense"]), hf)  # rank 0: no adapters, nothing to check
    check_critic_lora(critic_cfg(8, ["q_proj", "linear_fc2"]), hf)
    with pytest.raises(ConfigError, match=r"^critic\.model\.lora\.target_modules=\['attn'\]"):
        check_critic_lora(critic_cfg(8, ["attn"]), hf)
    with pytest.raises(ConfigError, match=r"critic\.model\.lora\.rank=128 exceeds the model's hidden size 64"):
        check_critic_lora(critic_cfg(128, ["linear_qkv"]), hf)
    moe = tmp_path / "moe"  # critic.model.path: the critic's own model decides, not the actor's
    moe.mkdir()
    shape = {
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 128,
        "intermediate_size": 32,
    }
    (moe / "config.json").write_text(json.dumps({"model_type": "qwen3_moe", "num_experts": 8, **shape}))
    check_critic_lora(critic_cfg(8, ["linear_fc1"]), hf)  # the actor's dense model
    with pytest.raises(ConfigError, match=r"critic\.model\.lora\.target_modules holds \['linear_fc1'\].*MoE"):
        check_critic_lora(critic_cfg(8, ["linear_fc1"], path=str(moe)), hf)


def test_critic_lora_keys_compose_refuse_what_the_critic_lacks_and_rank_zero_builds_nothing():
    from dagrl.config.inert_keys import check_inert_keys
    from dagrl.config.load import compose
    from dagrl.config.tree import Cfg
    from dagrl.trainer.build import lora_spec
    from dagrl.trainer.resume_policy import refusal

    assert lora_spec(Cfg(compose([])).critic.model.lora) is None  # the default: today's full fine-tuning
    lora = Cfg(
        compose(["critic.model.lora.rank=8", "critic.model.lora.target_modules=[q_proj,o_proj]"])
    ).critic.model.lora
    spec = lora_spec(lora)
    assert (spec.rank, spec.alpha, spec.targets, spec.merged) == (8, 32.0, ("linear_qkv", "linear_proj"), False)
    with pytest.raises(ConfigError, match="'critic.model.lora.merge' is no config key: the critic has no rollout"):
        compose(["critic.model.lora.merge=true"])
    with pytest.raises(ConfigError, match="set critic.model.lora.rank"):  # verl's FSDP name
        compose(["critic.model.lora_rank=8"])
    with pytest.raises(ConfigError, match=r"critic\.model\.lora\.rank=0 \(no LoRA"):
        check_inert_keys(Cfg(compose(["dag=ppo", "algorithm.adv_estimator=gae", "critic.model.lora.alpha=16"])))
    assert "adapters" in refusal("critic.model.lora.target_modules", {})
