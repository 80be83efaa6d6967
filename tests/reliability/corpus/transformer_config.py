from __future__ import annotations

from pathlib import Path

from tests.reliability.corpus.case import MEGATRON, MODEL_KEY, STARTUP, Case, Paths

TOPIC = "Megatron's TransformerConfig: other trainers' keys, override_transformer_config and determinism"
OVERRIDE = f"{MEGATRON}.override_transformer_config"
FULL = "actor_rollout_ref.model.enable_gradient_checkpointing=true"
DETERMINISTIC = f"{MEGATRON}.use_deterministic_algorithms=true"


def moe_model(ws: Path, paths: Paths) -> None:
    """{ws}/model: a tiny qwen3_moe (4 experts, top-2) with the tiny tokenizer."""
    from tests.conftest import make_tiny_model_dir

    make_tiny_model_dir(ws / "model", family="qwen3_moe")


MOE = f"{MODEL_KEY}={{ws}}/model"
# ROLL's strategy_config keys, where dagrl's Megatron section would hold them
ROLL_KEYS = (
    ("moe_token_dispatcher_type", "alltoall", "allgather | alltoall | flex"),
    ("moe_grouped_gemm", "true", "TransformerEngine"),
    ("moe_layer_recompute", "true", "not with full recompute"),
    ("recompute_granularity", "full", "actor_rollout_ref.model.enable_gradient_checkpointing=true"),
    ("recompute_method", "uniform", "with recompute_granularity=full"),
    ("recompute_num_layers", "1", "with recompute_granularity=full"),
)
CASES: tuple[Case, ...] = (
    *(
        Case(
            f"roll_key_{name}",
            f"ROLL's `{MEGATRON.removeprefix('actor_rollout_ref.')}.{name}={value}`",
            (f"{MEGATRON}.{name}={value}",),
            (f"write +{OVERRIDE}.{name}={value}", note),
        )
        for name, value, note in ROLL_KEYS
    ),
    Case(
        "deterministic_mode_key",
        "`megatron.deterministic_mode=true` (Megatron's name for a part of dagrl's switch)",
        (f"{MEGATRON}.deterministic_mode=true",),
        (DETERMINISTIC,),
    ),
    Case(
        "token_dispatcher_unknown",
        "`+...override_transformer_config.moe_token_dispatcher_type=all2all` (an MoE model)",
        (MOE, f"+{OVERRIDE}.moe_token_dispatcher_type=all2all"),
        (f"{OVERRIDE}.moe_token_dispatcher_type='all2all'", "allgather, alltoall, flex"),
        make=moe_model,
    ),
    Case(
        "recompute_granularity_unknown",
        "`+...override_transformer_config.recompute_granularity=partial`",
        (f"+{OVERRIDE}.recompute_granularity=partial",),
        (f"{OVERRIDE}.recompute_granularity='partial'", "full", "selective"),
    ),
    Case(
        "full_recompute_without_method",
        "`recompute_granularity=full` in the map without `recompute_method`",
        (f"+{OVERRIDE}.recompute_granularity=full", f"+{OVERRIDE}.recompute_num_layers=1"),
        (f"+{OVERRIDE}.recompute_method=uniform",),
    ),
    Case(
        "full_recompute_without_layers",
        "`recompute_granularity=full recompute_method=block` without `recompute_num_layers`",
        (f"+{OVERRIDE}.recompute_granularity=full", f"+{OVERRIDE}.recompute_method=block"),
        (f"+{OVERRIDE}.recompute_num_layers=1",),
    ),
    Case(
        "recompute_method_unknown",
        "`model.enable_gradient_checkpointing=true` with `+...recompute_method=blocks`",
        (FULL, f"+{OVERRIDE}.recompute_method=blocks"),
        (f"{OVERRIDE}.recompute_method='blocks'", "uniform", "block"),
    ),
    Case(
        "selective_recompute_with_layers",
        "`recompute_granularity=selective` with `recompute_num_layers=2`",
        (f"+{OVERRIDE}.recompute_granularity=selective", f"+{OVERRIDE}.recompute_num_layers=2"),
        (f"drop +{OVERRIDE}.recompute_num_layers",),
    ),
    Case(
        "recompute_modules_unknown",
        "`recompute_granularity=selective` with `recompute_modules=[attention]`",
        (f"+{OVERRIDE}.recompute_granularity=selective", f"+{OVERRIDE}.recompute_modules=[attention]"),
        (f"{OVERRIDE}.recompute_modules has 'attention'", "core_attn"),
    ),
    Case(
        "moe_layer_recompute_with_full_recompute",
        "`model.enable_gradient_checkpointing=true` with `+...moe_layer_recompute=true` (an MoE model)",
        (MOE, FULL, f"+{OVERRIDE}.moe_layer_recompute=true"),
        (f"{OVERRIDE}.moe_layer_recompute=true", f"+{OVERRIDE}.recompute_modules=[moe]"),
        make=moe_model,
    ),
    Case(
        "moe_field_on_a_dense_model",
        "`+...override_transformer_config.moe_router_topk=2` on a dense model",
        (f"+{OVERRIDE}.moe_router_topk=2",),
        (f"{OVERRIDE}.moe_router_topk is an MoE field", "dense", f"drop +{OVERRIDE}.moe_router_topk"),
    ),
    Case(
        "layout_field_contradicts_the_layout",
        "`+...override_transformer_config.tensor_model_parallel_size=2` with TP=1",
        (f"+{OVERRIDE}.tensor_model_parallel_size=2",),
        (f"set {MEGATRON}.tensor_model_parallel_size=2 instead",),
    ),
    Case(
        "sequence_parallel_field_with_tp1",
        "`+...override_transformer_config.sequence_parallel=true` with TP=1",
        (f"+{OVERRIDE}.sequence_parallel=true",),
        (f"{MEGATRON}.tensor_model_parallel_size > 1",),
    ),
    Case(
        "fusion_contradicts_determinism",
        "`megatron.use_deterministic_algorithms=true` with `+...cross_entropy_loss_fusion=true`",
        (DETERMINISTIC, f"+{OVERRIDE}.cross_entropy_loss_fusion=true"),
        (f"{OVERRIDE}.cross_entropy_loss_fusion=True contradicts", f"drop +{OVERRIDE}.cross_entropy_loss_fusion"),
    ),
    Case(
        "nondeterministic_nccl_algo",
        "`megatron.use_deterministic_algorithms=true` with `NCCL_ALGO=NVLS` in the environment",
        (DETERMINISTIC,),
        ("NCCL_ALGO='NVLS'", "NCCL_ALGO=Ring"),
        env={"NCCL_ALGO": "NVLS"},
        found=STARTUP,
    ),
)
