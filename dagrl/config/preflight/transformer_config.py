"""Pre-flight of actor_rollout_ref.actor.megatron.override_transformer_config: each field is one of megatron.core's
TransformerConfig (read from its source, no megatron import), and its value passes the rules TransformerConfig's
__post_init__ (megatron-core 0.16.1) and its MoE layer enforce, checked here so that a bad value fails in a second,
before any model is built, instead of in a traceback once the models' build starts. Fields that contradict dagrl's
own keys (the parallel layout, the determinism switch) or the model (MoE fields on a dense model) are refused too:
the process groups, the switch and the weights follow dagrl's keys and config.json, not the map."""

from __future__ import annotations

from types import SimpleNamespace

from dagrl.config.checks import get
from dagrl.config.errors import ConfigError, require
from dagrl.config.megatron_fields import DETERMINISTIC, dagrl_fields
from dagrl.config.tree import Cfg
from dagrl.placement.layout import PARALLEL_SIZE_NAMES

MEGATRON = "actor_rollout_ref.actor.megatron"
KEY = f"{MEGATRON}.override_transformer_config"
DISPATCHERS = ("allgather", "alltoall", "flex")  # TransformerConfig.moe_token_dispatcher_type; MoELayer's branches
GRANULARITIES = ("full", "selective")
METHODS = ("uniform", "block")
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
LAYOUT_FIELDS = (*PARALLEL_SIZE_NAMES, "sequence_parallel")  # dagrl's layout keys, TransformerConfig's names


def overrides_of(cfg: Cfg) -> dict:
    overrides = get(cfg, KEY)
    overrides = overrides.to_dict() if hasattr(overrides, "to_dict") else overrides
    return overrides if isinstance(overrides, dict) else {}


def check_transformer_overrides(cfg: Cfg) -> None:
    """Every rule of this module that needs the config only (check_model_fields needs the model's config.json)."""
    overrides = overrides_of(cfg)
    if not overrides:
        return
    check_field_names(overrides)
    check_layout_fields(cfg, overrides)
    dispatcher = overrides.get("moe_token_dispatcher_type", "allgather")
    require(
        dispatcher in DISPATCHERS,
        f"{KEY}.moe_token_dispatcher_type",
        f"{KEY}.moe_token_dispatcher_type={dispatcher!r} is not a Megatron-Core token dispatcher: set one of "
        f"{', '.join(DISPATCHERS)} (dagrl's default: alltoall on GPU, allgather on CPU)",
    )
    check_recompute(cfg, overrides)
    if cfg.actor_rollout_ref.actor.megatron.use_deterministic_algorithms is True:
        for name, value in DETERMINISTIC.items():
            require(
                overrides.get(name, value) == value,
                f"{KEY}.{name}",
                f"{KEY}.{name}={overrides.get(name)} contradicts {MEGATRON}.use_deterministic_algorithms=true, "
                f"which sets {name}={value}: drop +{KEY}.{name} (or the switch)",
            )


def check_field_names(overrides: dict) -> None:
    """Fields of TransformerConfig (and its base ModelParallelConfig); the engine would refuse an unknown one only
    once the models are built."""
    from dagrl.config.megatron_fields import transformer_config_fields

    known = transformer_config_fields()
    if known is None:  # megatron-core not found where expected: the engine checks at build time
        return
    unknown = sorted(name for name in overrides if name not in known)
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], sorted(known), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(
            f"{KEY}.{unknown[0]}",
            f"{KEY}.{unknown[0]} is not a field of megatron.core's TransformerConfig{hint}: drop "
            f"+{KEY}.{unknown[0]} or fix its name (the fields: megatron/core/transformer/"
            f"transformer_config.py)",
        )


def check_layout_fields(cfg: Cfg, overrides: dict) -> None:
    """A parallel size in the map would reach TransformerConfig while the process groups follow dagrl's keys: one
    that differs from what those keys give is refused (the same value is harmless)."""
    megatron = cfg.actor_rollout_ref.actor.megatron
    tp = megatron.tensor_model_parallel_size
    effective = {name: getattr(megatron, name) for name in LAYOUT_FIELDS}
    effective.update(
        virtual_pipeline_model_parallel_size=megatron.virtual_pipeline_model_parallel_size or 1,
        expert_tensor_parallel_size=megatron.expert_tensor_parallel_size or tp,  # null: TP, as Megatron does
        sequence_parallel=bool(megatron.sequence_parallel) and tp > 1,  # off with TP=1 (layout_from_config)
    )
    for name in LAYOUT_FIELDS:
        if name not in overrides:
            continue
        value = overrides[name]
        if name == "virtual_pipeline_model_parallel_size":
            value = value or 1
        fix = f"set {MEGATRON}.{name}={overrides[name]} instead"
        if name == "sequence_parallel" and value and tp == 1:
            fix = f"sequence parallelism needs {MEGATRON}.tensor_model_parallel_size > 1: set it and {MEGATRON}.{name}"
        require(
            value == effective[name],
            f"{KEY}.{name}",
            f"{KEY}.{name}={overrides[name]} contradicts {MEGATRON}.{name} (dagrl builds the process groups from "
            f"its keys: {effective[name]}): {fix}, and drop +{KEY}.{name}",
        )


def check_recompute(cfg: Cfg, overrides: dict) -> None:
    """Activation recompute as TransformerConfig.__post_init__ checks it, with what model.enable_gradient_checkpointing
    adds (full, uniform, one layer a unit) unless the map sets recompute_granularity."""
    checkpointing = cfg.actor_rollout_ref.model.enable_gradient_checkpointing is True
    settings = {**dagrl_fields(checkpointing, False, overrides), **overrides}
    granularity = settings.get("recompute_granularity")
    method, layers = settings.get("recompute_method"), settings.get("recompute_num_layers")
    full = (
        "actor_rollout_ref.model.enable_gradient_checkpointing=true"
        if checkpointing
        else f"{KEY}.recompute_granularity=full"
    )
    require(
        granularity is None or granularity in GRANULARITIES,
        f"{KEY}.recompute_granularity",
        f"{KEY}.recompute_granularity={granularity!r} is not one of Megatron-Core's: set full (every layer, with "
        f"recompute_method and recompute_num_layers) or selective (the modules of recompute_modules)",
    )
    if granularity is not None:
        require(
            method is None or method in METHODS,
            f"{KEY}.recompute_method",
            f"{KEY}.recompute_method={method!r} is not one of Megatron-Core's: set uniform (layers split into units "
            f"of recompute_num_layers) or block (the first recompute_num_layers layers of each stage)",
        )
        require(
            granularity == "selective" or method is not None,
            f"{KEY}.recompute_method",
            f"{KEY}.recompute_granularity=full needs a recompute_method: add +{KEY}.recompute_method=uniform (or "
            f"block)",
        )
        require(
            granularity == "selective" or layers is not None,
            f"{KEY}.recompute_num_layers",
            f"{KEY}.recompute_granularity=full needs recompute_num_layers: add +{KEY}.recompute_num_layers=1 (layers "
            f"a unit with uniform, layers of each stage with block)",
        )
        require(
            granularity != "selective" or layers is None,
            f"{KEY}.recompute_num_layers",
            f"{KEY}.recompute_num_layers={layers} with recompute_granularity=selective: Megatron-Core needs it null "
            f"there (selective recomputes the modules of recompute_modules in every layer): drop "
            f"+{KEY}.recompute_num_layers",
        )
    if overrides.get("moe_layer_recompute"):
        require(
            granularity != "full",
            f"{KEY}.moe_layer_recompute",
            f"{KEY}.moe_layer_recompute=true with full recompute ({full}): Megatron-Core refuses the two together; "
            f"recompute only the MoE layers with +{KEY}.recompute_granularity=selective "
            f"+{KEY}.recompute_modules=[moe] (what moe_layer_recompute means), or drop it",
        )
    modules = settings.get("recompute_modules")
    if granularity == "selective" and modules is not None:
        require(
            isinstance(modules, list),
            f"{KEY}.recompute_modules",
            f"{KEY}.recompute_modules={modules!r} must be a list, e.g. +{KEY}.recompute_modules=[core_attn,moe]",
        )
        wrong = [name for name in modules if name not in RECOMPUTE_MODULES]
        require(
            not wrong,
            f"{KEY}.recompute_modules",
            f"{KEY}.recompute_modules has {', '.join(map(repr, wrong))}, not one of Megatron-Core's: choose from "
            f"{', '.join(RECOMPUTE_MODULES)}",
        )
        require(
            "moe_act" not in modules or overrides.get("moe_grouped_gemm") is not False,
            f"{KEY}.recompute_modules",
            f"{KEY}.recompute_modules with moe_act needs grouped GEMM, which {KEY}.moe_grouped_gemm=false turns off: "
            f"drop moe_act or that override",
        )
        require(
            "mla_up_proj" not in modules or overrides.get("multi_latent_attention") is True,
            f"{KEY}.recompute_modules",
            f"{KEY}.recompute_modules with mla_up_proj needs multi-latent attention, which this model has not: drop "
            f"mla_up_proj",
        )


def check_model_fields(cfg: Cfg, hf_config: dict) -> None:
    """MoE fields on a dense model: its config.json has no experts, so dagrl builds no MoE layer for them to act on
    (and num_moe_experts would build experts its weights do not have)."""
    from dagrl.engine.megatron.preflight import num_experts

    overrides = overrides_of(cfg)
    moe = [name for name in overrides if name == "num_moe_experts" or name.startswith("moe_")]
    if not moe or num_experts(SimpleNamespace(**hf_config)):
        return
    raise ConfigError(
        f"{KEY}.{moe[0]}",
        f"{KEY}.{moe[0]} is an MoE field but the model at actor_rollout_ref.model.path="
        f"{cfg.actor_rollout_ref.model.path} is dense (its config.json has no experts): drop +{KEY}.{moe[0]}",
    )
