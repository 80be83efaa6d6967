"""A LoRA run end to end on CPU (adapter-only sync into the hf rollout, the KL reference as the base with adapters
off): a kill -9 and relaunch reproduce the uninterrupted run exactly, the checkpoints hold the adapter, every LoRA key
is read. Rank 0 (the default) builds no adapter: every other run of the suite is that case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dagrl.config.errors import ConfigError
from dagrl.engine.megatron.lora import read_adapter
from tests.conftest import cpu_run_overrides
from tests.helpers import metrics_by_step
from tests.trainer.test_end_to_end import REWARD, train_together

LORA = {
    "actor_rollout_ref.model.lora.rank": 4,
    "actor_rollout_ref.model.lora.alpha": 8,
    "actor_rollout_ref.model.lora.dropout": 0.1,
    "actor_rollout_ref.model.lora.target_modules": "[q_proj,k_proj,v_proj,o_proj,linear_fc1,linear_fc2]",
    "actor_rollout_ref.model.lora.merge": False,  # adapter-only sync: the base once, then load_adapter
}


def args(tiny_model, tiny_data, out: Path, **extra) -> list[str]:
    return cpu_run_overrides(
        tiny_model,
        tiny_data,
        out,
        **{
            "custom_reward_function.path": str(REWARD),
            "trainer.total_training_steps": 4,
            "trainer.save_freq": 2,
            "trainer.test_freq": 2,
            "actor_rollout_ref.actor.use_kl_loss": True,
            "actor_rollout_ref.actor.optim.lr": 1e-2,
            **extra,
        },
    )


def test_lora_run_resumes_exactly_and_checkpoints_the_adapter(tiny_model, tiny_data, tmp_path):
    reads = tmp_path / "reads.json"
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train_together(
        (args(tiny_model, tiny_data, straight, **LORA), {"DAGRL_RECORD_CONFIG_READS": str(reads)}, False),
        (args(tiny_model, tiny_data, resumed, **LORA), {"DAGRL_FAULT": "actor_update:4"}, True),
    )
    train_together((args(tiny_model, tiny_data, resumed, **LORA), {}, False))
    expected, actual = metrics_by_step(straight), metrics_by_step(resumed)
    assert sorted(expected) == [0, 1, 2, 3, 4] and actual == expected
    assert expected[4]["actor/grad_norm"] > 0 and expected[4]["actor/kl_loss"] > 0  # the adapters moved off the base
    adapter = read_adapter(str(straight / "global_step_4" / "actor"))
    assert adapter.rank == 4 and adapter.alpha == 8 and len(adapter.tensors) == 2 * 7 * 2  # 2 layers, 7 modules
    read = set(json.loads(reads.read_text()))
    assert {
        f"actor_rollout_ref.model.lora.{k}" for k in ("rank", "alpha", "dropout", "target_modules", "merge")
    } <= read


def test_rank_zero_builds_no_adapter_and_hf_names_map_to_the_fused_linears():
    from dagrl.config.inert_keys import check_inert_keys
    from dagrl.config.load import compose
    from dagrl.config.tree import Cfg
    from dagrl.trainer.build import lora_spec

    assert lora_spec(Cfg(compose([])).actor_rollout_ref.model.lora) is None
    with pytest.raises(ConfigError, match="lora.rank=0"):  # alpha without a rank would change nothing
        check_inert_keys(Cfg(compose(["actor_rollout_ref.model.lora.alpha=16"])))
    spec = lora_spec(Cfg(compose([f"{k}={v}" for k, v in LORA.items()])).actor_rollout_ref.model.lora)
    assert (spec.rank, spec.alpha, spec.dropout, spec.scaling) == (4, 8.0, 0.1, 2.0)
    assert spec.targets == ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")
    from dagrl.trainer.resume_policy import refusal

    assert "adapters" in refusal("actor_rollout_ref.model.lora.rank", {})
    assert refusal("actor_rollout_ref.model.lora.alpha", {}) is None  # a new scaling applies from the next step


@pytest.mark.parametrize("merge, rollout", [(False, "vllm"), (True, "vllm"), (False, "hf"), (True, "hf")])
def test_the_actor_computes_merged_exactly_when_the_rollout_serves_the_merge(merge, rollout):
    """Merged sync, or adapter-only to the hf rollout (whose load_adapter merges); vLLM's LoRA kernels apply the
    adapter beside the base matmul, as the unmerged actor does."""
    from types import SimpleNamespace

    from dagrl.config.load import compose
    from dagrl.config.tree import Cfg
    from dagrl.engine.base import OptimSpec
    from dagrl.placement import ParallelLayout
    from dagrl.trainer.build import megatron_spec

    overrides = {
        **LORA,
        "actor_rollout_ref.model.lora.merge": merge,
        "actor_rollout_ref.rollout.name": rollout,
        "actor_rollout_ref.model.path": "/nonexistent",
    }
    cfg = Cfg(compose([f"{k}={v}" for k, v in overrides.items()]))
    shape = SimpleNamespace(parallel=ParallelLayout())
    assert megatron_spec(cfg, shape, OptimSpec()).lora.merged is (merge or rollout == "hf")
    assert megatron_spec(cfg, shape, None).lora is None  # a frozen reference builds no adapter
    from dagrl.config.derived import lora_served_merged

    no_adapters = Cfg(compose([f"{k}={v}" for k, v in overrides.items()] + ["actor_rollout_ref.model.lora.rank=0"]))
    assert lora_served_merged(cfg) is (merge or rollout == "hf") and lora_served_merged(no_adapters) is False
