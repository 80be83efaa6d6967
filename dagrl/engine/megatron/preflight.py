"""Pre-flight checks of a Megatron layout against an HF model config.

Runs before any heavy import: this module imports neither megatron nor vllm nor transformers. `hf_config` is
anything with the HF config attributes (a `PretrainedConfig`, or a namespace read from config.json).
"""

from __future__ import annotations

from typing import Any

from dagrl.models.families import FAMILIES, family
from dagrl.placement import ParallelLayout

KEY = "actor_rollout_ref.actor.megatron"


def num_experts(hf_config: Any) -> int | None:
    """Routed experts of an MoE config (transformers names it num_experts or num_local_experts), else None."""
    for name in ("num_experts", "num_local_experts"):
        value = getattr(hf_config, name, None)
        if value:
            return int(value)
    return None


def unsupported_features(hf_config: Any) -> list[str]:
    """HF features the Megatron converter cannot represent, by name (empty when the model is supported)."""
    problems = []
    model_type = getattr(hf_config, "model_type", None)
    kind = family(model_type)
    if kind is None:
        problems.append(f"model_type={model_type!r} (supported: {', '.join(FAMILIES)})")
    rope = getattr(hf_config, "rope_parameters", None) or getattr(hf_config, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
    if rope_type not in (None, "default"):
        problems.append(f"rope scaling rope_type={rope_type!r} (only unscaled RoPE)")
    if getattr(hf_config, "use_sliding_window", False) or (
        kind is not None and kind.sliding_window_field and getattr(hf_config, "sliding_window", None) is not None
    ):
        problems.append(f"sliding_window={getattr(hf_config, 'sliding_window', None)} (only full attention)")
    layer_types = getattr(hf_config, "layer_types", None) or []
    if any(kind != "full_attention" for kind in layer_types):
        problems.append(f"layer_types={sorted(set(layer_types))} (only full_attention)")
    if getattr(hf_config, "mlp_only_layers", None):
        problems.append(f"mlp_only_layers={hf_config.mlp_only_layers} (every layer must be MoE)")
    if (getattr(hf_config, "decoder_sparse_step", 1) or 1) != 1:
        problems.append(f"decoder_sparse_step={hf_config.decoder_sparse_step} (every layer must be MoE)")
    if getattr(hf_config, "shared_expert_intermediate_size", 0) or getattr(hf_config, "n_shared_experts", 0):
        problems.append("shared experts")
    if getattr(hf_config, "mlp_bias", False):
        problems.append("mlp_bias=True")
    if kind is not None and not kind.attention_bias and getattr(hf_config, "attention_bias", False):
        problems.append("attention_bias=True")
    if getattr(hf_config, "hidden_act", "silu") != "silu":
        problems.append(f"hidden_act={hf_config.hidden_act!r} (only silu / SwiGLU)")
    return problems


def check_layout(hf_config: Any, layout: ParallelLayout, world_size: int) -> None:
    """Raise ValueError (one line naming the config key and the fix) when `layout` cannot run `hf_config`."""
    problems = unsupported_features(hf_config)
    if problems:
        raise ValueError(
            f"model at {getattr(hf_config, '_name_or_path', '?')!r} uses what dagrl's Megatron "
            f"converter does not support: {'; '.join(problems)}"
        )
    tp = layout.tensor_model_parallel_size
    pp = layout.pipeline_model_parallel_size
    vpp = layout.virtual_pipeline_model_parallel_size
    cp = layout.context_parallel_size
    ep = layout.expert_model_parallel_size
    for name, value in (
        ("tensor_model_parallel_size", tp),
        ("pipeline_model_parallel_size", pp),
        ("context_parallel_size", cp),
        ("expert_model_parallel_size", ep),
    ):
        if value < 1:
            raise ValueError(f"{KEY}.{name}={value}: must be >= 1")
    heads = hf_config.num_attention_heads
    kv_heads = getattr(hf_config, "num_key_value_heads", None) or heads
    if heads % tp:
        raise ValueError(
            f"{KEY}.tensor_model_parallel_size={tp} does not divide num_attention_heads={heads}: "
            f"pick a divisor of {heads}"
        )
    if kv_heads % tp:
        raise ValueError(
            f"{KEY}.tensor_model_parallel_size={tp} does not divide num_key_value_heads={kv_heads} "
            f"(KV groups): pick a divisor of {kv_heads}"
        )
    layers = hf_config.num_hidden_layers
    stages = pp * (vpp or 1)
    if vpp is not None and vpp > 1 and pp == 1:
        raise ValueError(
            f"{KEY}.virtual_pipeline_model_parallel_size={vpp} needs pipeline_model_parallel_size>1:"
            f" set it to null or raise pipeline_model_parallel_size"
        )
    if layers % stages:
        vpp_name = f" x virtual_pipeline_model_parallel_size={vpp}" if vpp else ""
        raise ValueError(
            f"{KEY}.pipeline_model_parallel_size={pp}{vpp_name} does not divide "
            f"num_hidden_layers={layers}: pick sizes whose product divides {layers}"
        )
    experts = num_experts(hf_config)
    if ep > 1 and not experts:
        raise ValueError(f"{KEY}.expert_model_parallel_size={ep} but the model has no experts: set it to 1")
    if experts and experts % ep:
        raise ValueError(
            f"{KEY}.expert_model_parallel_size={ep} does not divide num_experts={experts}: pick a divisor of {experts}"
        )
    if experts and tp > 1 and not layout.sequence_parallel:
        raise ValueError(
            f"{KEY}.sequence_parallel=False with MoE and tensor_model_parallel_size={tp}: Megatron "
            f"needs sequence parallelism there, set it to True"
        )
    model_parallel = tp * pp * cp
    if world_size % model_parallel:
        raise ValueError(
            f"world size {world_size} is not a multiple of {KEY}.tensor_model_parallel_size x "
            f"pipeline_model_parallel_size x context_parallel_size = {tp}x{pp}x{cp}: change the "
            f"sizes or trainer.nnodes x trainer.n_gpus_per_node"
        )
    etp = layout.expert_tensor_parallel_size or tp
    # Megatron's expert groups split each pipeline stage's ranks into EP x ETP x expert-DP; context parallelism is
    # the attention's alone (AReaL's folding: attention TP2 x CP2, experts EP4 x ETP1 on the same 4 ranks)
    if experts and world_size % (pp * ep * etp):
        # unset, it follows the attention's TP: TP2 x EP2 on 2 ranks needs expert_tensor_parallel_size=1 said
        unset = " (null: tensor_model_parallel_size's)" if layout.expert_tensor_parallel_size is None else ""
        raise ValueError(
            f"{KEY}.expert_model_parallel_size={ep} x expert_tensor_parallel_size={etp}{unset} x "
            f"pipeline_model_parallel_size={pp} = {pp * ep * etp} does not divide the world size "
            f"{world_size}: change the sizes or trainer.nnodes x trainer.n_gpus_per_node"
        )
