"""check_layout: one-line errors naming the config key, before anything heavy is imported."""

import subprocess
import sys
from types import SimpleNamespace

import pytest

from dagrl.placement import ParallelLayout
from dagrl.engine.megatron.preflight import check_layout


def config(**overrides):
    values = dict(
        model_type="qwen3_moe",
        num_attention_heads=8,
        num_key_value_heads=2,
        num_hidden_layers=4,
        num_experts=4,
        rope_parameters={"rope_theta": 1e4, "rope_type": "default"},
        hidden_act="silu",
        mlp_only_layers=[],
        decoder_sparse_step=1,
        use_sliding_window=False,
        sliding_window=None,
    )
    values.update(overrides)
    return SimpleNamespace(**values)


def test_valid_layouts_pass():
    check_layout(
        config(),
        ParallelLayout(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, sequence_parallel=True),
        8,
    )
    check_layout(config(), ParallelLayout(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2), 2)
    check_layout(config(), ParallelLayout(expert_model_parallel_size=4), 4)
    # AReaL's folding, attention d1p4t2c2 and experts d1p4t1e4 on 16 ranks: context parallelism is not in the expert
    # groups (Megatron's rule; tests/tools/test_plan.py builds the same groups as Megatron for it)
    check_layout(
        config(),
        ParallelLayout(
            tensor_model_parallel_size=2,
            pipeline_model_parallel_size=4,
            context_parallel_size=2,
            expert_model_parallel_size=4,
            expert_tensor_parallel_size=1,
            sequence_parallel=True,
        ),
        16,
    )


@pytest.mark.parametrize(
    "layout, world, key",
    [
        (
            ParallelLayout(tensor_model_parallel_size=4),
            4,
            "tensor_model_parallel_size=4 does not divide num_key_value_heads",
        ),
        (
            ParallelLayout(tensor_model_parallel_size=3),
            3,
            "tensor_model_parallel_size=3 does not divide num_attention_heads",
        ),
        (ParallelLayout(pipeline_model_parallel_size=3), 3, "pipeline_model_parallel_size=3"),
        (
            ParallelLayout(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=4),
            2,
            "virtual_pipeline_model_parallel_size=4",
        ),
        (ParallelLayout(expert_model_parallel_size=3), 3, "expert_model_parallel_size=3 does not divide num_experts"),
        (ParallelLayout(tensor_model_parallel_size=2, sequence_parallel=True), 3, "world size 3"),
        (ParallelLayout(tensor_model_parallel_size=2), 2, "sequence_parallel=False with MoE"),
        (
            ParallelLayout(pipeline_model_parallel_size=2, expert_model_parallel_size=4, expert_tensor_parallel_size=2),
            8,
            "expert_model_parallel_size=4 x expert_tensor_parallel_size=2 x pipeline_model_parallel_size=2 = 16 "
            "does not divide the world size 8",
        ),
        (
            ParallelLayout(tensor_model_parallel_size=2, sequence_parallel=True, expert_model_parallel_size=2),
            2,
            "expert_tensor_parallel_size=2 (null: tensor_model_parallel_size's) x pipeline_model_parallel_size=1 = 4",
        ),
    ],
)
def test_bad_layouts_name_the_key(layout, world, key):
    with pytest.raises(ValueError, match="actor_rollout_ref.actor.megatron") as error:
        check_layout(config(), layout, world)
    assert key in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    "overrides, feature",
    [
        (dict(rope_parameters={"rope_theta": 1e4, "rope_type": "yarn", "factor": 4.0}), "rope_type='yarn'"),
        (dict(use_sliding_window=True, sliding_window=128), "sliding_window=128"),
        (dict(mlp_only_layers=[0]), "mlp_only_layers"),
        (dict(shared_expert_intermediate_size=64), "shared experts"),
        (dict(model_type="gemma"), "model_type='gemma'"),
    ],
)
def test_unsupported_features_are_named(overrides, feature):
    with pytest.raises(ValueError, match="does not support") as error:
        check_layout(config(**overrides), ParallelLayout(), 1)
    assert feature in str(error.value)


def test_preflight_imports_no_megatron():
    code = (
        "import sys, dagrl.engine.megatron.preflight, dagrl.engine.megatron; "
        "assert not any(m.startswith(('megatron', 'vllm')) for m in sys.modules), 'heavy import'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
