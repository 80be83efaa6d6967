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


# ---- override_transformer_config (dagrl/config/preflight/transformer_config.py) -------------------------------------
RECOMPUTE_CASES = [  # (override_transformer_config, model.enable_gradient_checkpointing)
    ({}, True),
    ({"recompute_granularity": "selective"}, False),
    ({"recompute_granularity": "selective", "recompute_modules": ["moe", "layernorm"]}, False),
    ({"recompute_granularity": "selective", "recompute_method": "uniform"}, False),  # Megatron ignores the method
    ({"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 1}, False),
    ({"recompute_method": "block"}, True),
    ({"recompute_num_layers": 2}, True),
    ({"moe_layer_recompute": True}, False),
    ({"moe_layer_recompute": True, "recompute_granularity": "selective"}, True),
    ({"recompute_granularity": "partial"}, False),
    ({"recompute_granularity": "full"}, False),
    ({"recompute_granularity": "full", "recompute_method": "uniform"}, False),
    ({"recompute_granularity": "full", "recompute_method": "blocks", "recompute_num_layers": 1}, False),
    ({"recompute_method": "blocks"}, True),
    ({"recompute_granularity": "selective", "recompute_num_layers": 1}, False),
    ({"recompute_granularity": "selective", "recompute_modules": ["attention"]}, False),
    ({"recompute_granularity": "selective", "recompute_modules": ["mla_up_proj"]}, False),
    ({"recompute_granularity": "selective", "recompute_modules": ["moe_act"], "moe_grouped_gemm": False}, False),
    ({"moe_layer_recompute": True}, True),
    ({"moe_layer_recompute": True, "recompute_granularity": "full", "recompute_method": "uniform"}, False),
]


@pytest.fixture(scope="module")
def base_config(tmp_path_factory):
    """A valid composed config (a dict) whose overrides the cases replace."""
    from dagrl.config.load import compose

    return compose([f"trainer.default_local_dir={tmp_path_factory.mktemp('ckpt')}"])


def with_overrides(base: dict, overrides: dict, checkpointing: bool = False, **megatron):
    import copy

    from dagrl.config.tree import Cfg

    data = copy.deepcopy(base)
    data["actor_rollout_ref"]["actor"]["megatron"].update(megatron, override_transformer_config=overrides)
    data["actor_rollout_ref"]["model"]["enable_gradient_checkpointing"] = checkpointing
    return Cfg(data)


@pytest.mark.parametrize("overrides,checkpointing", RECOMPUTE_CASES)
def test_recompute_overrides_are_refused_exactly_where_megatron_refuses_them(base_config, overrides, checkpointing):
    """Pre-flight's verdict equals TransformerConfig.__post_init__'s on what the engine would hand it (dagrl's
    fields from its own switches, then the map)."""
    from megatron.core.transformer import TransformerConfig

    from dagrl.config.errors import ConfigError
    from dagrl.config.megatron_fields import dagrl_fields
    from dagrl.config.preflight.transformer_config import check_transformer_overrides

    cfg = with_overrides(base_config, overrides, checkpointing)
    try:
        check_transformer_overrides(cfg)
        refused = None
    except ConfigError as error:
        refused = str(error)
    model = dict(num_layers=4, hidden_size=16, num_attention_heads=2, num_moe_experts=4, moe_ffn_hidden_size=8)
    try:
        TransformerConfig(**model, **{**dagrl_fields(checkpointing, False, overrides), **overrides})
        megatron = None
    except (ValueError, AssertionError) as error:
        megatron = str(error)
    assert (refused is None) == (megatron is None), (refused, megatron)
    assert refused is None or "override_transformer_config." in refused


@pytest.mark.parametrize(
    "overrides,megatron,refused",
    [
        ({"tensor_model_parallel_size": 2}, {"tensor_model_parallel_size": 2}, None),
        ({"tensor_model_parallel_size": 2}, {}, "tensor_model_parallel_size=2 instead"),
        ({"expert_tensor_parallel_size": 2}, {"tensor_model_parallel_size": 2}, None),  # null: TP's
        ({"expert_tensor_parallel_size": 1}, {"tensor_model_parallel_size": 2}, "expert_tensor_parallel_size=1"),
        ({"virtual_pipeline_model_parallel_size": None}, {}, None),
        ({"virtual_pipeline_model_parallel_size": 2}, {"pipeline_model_parallel_size": 2}, "virtual_pipeline"),
        ({"sequence_parallel": False}, {"sequence_parallel": True}, None),  # TP=1 turns it off
        (
            {"sequence_parallel": False},
            {"sequence_parallel": True, "tensor_model_parallel_size": 2},
            "sequence_parallel=False instead",
        ),
        ({"moe_token_dispatcher_type": "alltoall"}, {}, None),
        ({"moe_token_dispatcher_type": "all2all"}, {}, "allgather, alltoall, flex"),
        ({"deterministic_mode": True}, {"use_deterministic_algorithms": True}, None),
        ({"bias_dropout_fusion": True}, {"use_deterministic_algorithms": True}, "bias_dropout_fusion=True contra"),
        ({"bias_dropout_fusion": True}, {}, None),
    ],
)
def test_layout_dispatcher_and_determinism_fields(base_config, overrides, megatron, refused):
    from dagrl.config.errors import ConfigError
    from dagrl.config.preflight.transformer_config import check_transformer_overrides

    cfg = with_overrides(base_config, overrides, **megatron)
    if refused is None:
        check_transformer_overrides(cfg)
        return
    with pytest.raises(ConfigError, match="override_transformer_config") as error:
        check_transformer_overrides(cfg)
    assert refused in str(error.value)


def test_moe_fields_are_refused_on_a_dense_model_only(base_config):
    from dagrl.config.errors import ConfigError
    from dagrl.config.preflight.transformer_config import check_model_fields

    dense = {"model_type": "qwen3", "num_hidden_layers": 2}
    for name in ("num_moe_experts", "moe_grouped_gemm", "moe_layer_recompute"):
        cfg = with_overrides(base_config, {name: True})
        check_model_fields(cfg, {**dense, "model_type": "qwen3_moe", "num_experts": 4})
        with pytest.raises(ConfigError, match=f"{name} is an MoE field but .* is dense"):
            check_model_fields(cfg, dense)
    check_model_fields(with_overrides(base_config, {"recompute_granularity": "selective"}), dense)


def test_the_plan_refuses_an_override_with_the_trainers_line(tmp_path, tiny_model, tiny_data):
    """dagrl.plan runs the same pre-flight: one line, exit 2, the same words as the trainer's."""
    bad = [
        f"actor_rollout_ref.model.path={tiny_model}",
        f"data.train_files={tiny_data['train']}",
        "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "+actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity=partial",
    ]
    runs = [
        subprocess.run([sys.executable, "-m", module, *bad], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        for module in ("dagrl.plan", "dagrl.main_dag")
    ]
    assert [run.returncode for run in runs] == [2, 2]
    line = runs[0].stderr.strip().splitlines()[-1]
    assert "override_transformer_config.recompute_granularity='partial' is not one of Megatron-Core's" in line
    assert line in runs[1].stderr.splitlines()
