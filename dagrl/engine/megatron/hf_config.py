"""HF model config -> Megatron TransformerConfig, layer spec and GPTModel (every family of dagrl/models/families.py)."""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

import torch
import torch.nn.functional as F

from dagrl.config.megatron_fields import dagrl_fields
from dagrl.engine.megatron import compat
from dagrl.models.families import family
from dagrl.placement import ParallelLayout
from dagrl.engine.megatron.preflight import num_experts, unsupported_features

logger = logging.getLogger(__name__)

# Every fusion needs Apex/TE or costs a torch.compile of several seconds: off on CPU.
_CPU_FUSIONS_OFF = dict(
    gradient_accumulation_fusion=False,
    bias_activation_fusion=False,
    masked_softmax_fusion=False,
    bias_dropout_fusion=False,
    apply_rope_fusion=False,
    persist_layer_norm=False,
    cross_entropy_loss_fusion=False,
    moe_permute_fusion=False,
)


def rope_theta(hf_config: Any) -> float:
    """transformers 5.x keeps the RoPE base in `rope_parameters`; 4.x had `rope_theta`."""
    params = getattr(hf_config, "rope_parameters", None)
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    return float(hf_config.rope_theta)


def head_dim(hf_config: Any) -> int:
    return getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads


def padded_vocab_size(vocab_size: int, tp_size: int) -> int:
    """Vocab rows Megatron holds: a multiple of 128 and of TP. The extra rows are masked out of every softmax."""
    multiple = 128 * tp_size // math.gcd(128, tp_size)
    return -(-vocab_size // multiple) * multiple


def transformer_config(
    hf_config: Any,
    layout: ParallelLayout,
    param_dtype: torch.dtype,
    *,
    on_gpu: bool,
    gradient_checkpointing: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Any:
    """The TransformerConfig of `hf_config` under `layout`; `overrides` (override_transformer_config) win."""
    from megatron.core.transformer import TransformerConfig

    problems = unsupported_features(hf_config)
    if problems:
        raise ValueError(f"unsupported model features: {'; '.join(problems)}")
    experts, kind = num_experts(hf_config), family(hf_config.model_type)
    sequence_parallel = layout.sequence_parallel and layout.tensor_model_parallel_size > 1
    if layout.sequence_parallel and not sequence_parallel:
        logger.warning("actor_rollout_ref.actor.megatron.sequence_parallel=True with TP=1: turned off")
    kwargs: dict[str, Any] = dict(
        num_layers=hf_config.num_hidden_layers,
        hidden_size=hf_config.hidden_size,
        ffn_hidden_size=hf_config.intermediate_size,
        num_attention_heads=hf_config.num_attention_heads,
        num_query_groups=getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads,
        kv_channels=head_dim(hf_config),
        layernorm_epsilon=hf_config.rms_norm_eps,
        normalization="RMSNorm",
        gated_linear_unit=True,
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=kind.qkv_bias or bool(getattr(hf_config, "attention_bias", False)),
        qk_layernorm=kind.qk_norm,
        hidden_dropout=0.0,
        attention_dropout=float(getattr(hf_config, "attention_dropout", 0.0) or 0.0),
        attention_softmax_in_fp32=True,
        init_method_std=getattr(hf_config, "initializer_range", 0.02),
        **layout.sizes(),
        sequence_parallel=sequence_parallel,
        params_dtype=param_dtype,
        pipeline_dtype=param_dtype,
        bf16=param_dtype == torch.bfloat16,
        fp16=param_dtype == torch.float16,
        use_cpu_initialization=not on_gpu,
        variable_seq_lengths=False,
    )
    if experts:
        kwargs.update(
            num_moe_experts=experts,
            moe_ffn_hidden_size=getattr(hf_config, kind.expert_ffn),
            moe_router_topk=hf_config.num_experts_per_tok,
            moe_router_score_function="softmax",
            # HF: softmax over all experts, top-k, renormalise iff norm_topk_prob (always for Mixtral). Megatron's
            # softmax over the top-k logits equals the renormalised case; pre-softmax matches the un-normalised one.
            moe_router_pre_softmax=not (kind.topk_renormalised or getattr(hf_config, "norm_topk_prob", False)),
            moe_router_load_balancing_type="none",
            moe_aux_loss_coeff=0.0,
            moe_token_dispatcher_type="alltoall" if on_gpu else "allgather",
            # Grouped GEMM is TransformerEngine's (TEGroupedMLP); without TE the experts run one by one.
            moe_grouped_gemm=on_gpu and compat.transformer_engine_available(),
        )
    if not on_gpu or not compat.transformer_engine_available():
        kwargs.update(_CPU_FUSIONS_OFF)  # the fused kernels come from Apex/TE
    else:  # TE's fused RoPE (fp32 inside) and the fused SwiGLU: what bare Megatron-Core runs with
        kwargs.update(apply_rope_fusion=True, bias_activation_fusion=True)
    if not on_gpu or (layout.virtual_pipeline_model_parallel_size or 1) > 1:
        # Batched p2p under VPP gives wrong gradients, silently: gloo matches concurrent sends between two ranks by
        # posting order (an activation and a gradient of equal shape swap), and on 2xH200 with NCCL and
        # megatron-core 0.19.2 a PP2xVPP2 step's grad norm came out 36418 instead of 202.9 (HF: 202.8).
        kwargs.update(batch_p2p_comm=False)
    overrides = overrides or {}
    # megatron.use_deterministic_algorithms turns torch's process-wide flag on at launch, before any model is built
    # (dagrl/config/launch_env.py): every model of the process (actor, reference, critic, teacher) follows it
    kwargs.update(dagrl_fields(gradient_checkpointing, torch.are_deterministic_algorithms_enabled(), overrides))
    known = {f.name for f in dataclasses.fields(TransformerConfig)}
    for key, value in overrides.items():
        if key not in known:
            raise ValueError(
                f"actor_rollout_ref.actor.megatron.override_transformer_config.{key}: not a field of "
                f"megatron.core TransformerConfig"
            )
        kwargs[key] = value
    config = TransformerConfig(**kwargs)
    from megatron.core.distributed import finalize_model_grads

    # Without it tied-embedding grads under PP and sequence-parallel norm grads are never reduced.
    config.finalize_model_grads_func = finalize_model_grads
    return config


def layer_spec(config: Any, on_gpu: bool) -> Any:
    """Transformer Engine spec on GPU (fused norms: see weights.py's TE hook), the local spec on CPU and on a
    GPU without TransformerEngine (no sequence parallel, context parallel or fused kernels there)."""
    from megatron.core.models.gpt import gpt_layer_specs

    if on_gpu and not compat.transformer_engine_available():
        logger.warning("TransformerEngine is not installed: the GPU model uses Megatron's local layer spec")
    elif on_gpu:
        return gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec(
            num_experts=config.num_moe_experts,
            moe_grouped_gemm=config.moe_grouped_gemm,
            qk_layernorm=config.qk_layernorm,
        )
    return gpt_layer_specs.get_gpt_layer_local_spec(
        num_experts=config.num_moe_experts,
        moe_grouped_gemm=False,
        qk_layernorm=config.qk_layernorm,
        normalization="RMSNorm",
    )


def layer_spec_name(modules: list[torch.nn.Module]) -> str:
    """'transformer_engine' or 'local': the layer spec the chunks were built with. The two name some tensors
    differently (fused norms, grouped experts), so a checkpoint loads only into a model of its own spec."""
    uses_te = any("transformer_engine" in type(sub).__module__ for module in modules for sub in module.modules())
    return "transformer_engine" if uses_te else "local"


def build_gpt_chunks(hf_config: Any, config: Any, on_gpu: bool) -> list[torch.nn.Module]:
    """This rank's model chunks (one per virtual pipeline stage), not yet wrapped in DDP."""
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel

    vpp = config.virtual_pipeline_model_parallel_size or 1
    spec = layer_spec(config, on_gpu)
    chunks = []
    for vp_stage in range(vpp):
        stage = vp_stage if vpp > 1 else None
        chunks.append(
            GPTModel(
                config=config,
                transformer_layer_spec=spec,
                vocab_size=padded_vocab_size(hf_config.vocab_size, config.tensor_model_parallel_size),
                max_sequence_length=hf_config.max_position_embeddings,
                pre_process=parallel_state.is_pipeline_first_stage(ignore_virtual=False, vp_stage=stage),
                post_process=parallel_state.is_pipeline_last_stage(ignore_virtual=False, vp_stage=stage),
                share_embeddings_and_output_weights=bool(getattr(hf_config, "tie_word_embeddings", False)),
                position_embedding_type="rope",
                rotary_base=rope_theta(hf_config),
                vp_stage=stage,
            )
        )
    return chunks
