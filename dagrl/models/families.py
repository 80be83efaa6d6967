"""Every model family dagrl trains, declared once. A family is config.json's `model_type` built as one Megatron
GPTModel (RMSNorm, SwiGLU, RoPE); what sets one apart is a handful of switches, read by pre-flight
(dagrl/engine/megatron/preflight.py), the converter's TransformerConfig (dagrl/engine/megatron/hf_config.py), the
weight-shape check (dagrl/config/model_shapes.py), the planner's parameter count (dagrl/plan/model.py) and the
presets tools and tests build (dagrl/plan/presets.py); the MoE names (moe_block, expert_names) are read by the
weight mapping (dagrl/engine/megatron/weights.py) and the hf rollout's sync (dagrl/engine/rollout/fused_experts.py).
Adding a family is one `Family(...)` line here (and, if its checkpoints name other tensors differently, a row in
weights.py's tables). Imports nothing."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    model_type: str  # config.json's model_type
    config_class: str  # the transformers config class (presets build it)
    qkv_bias: bool = False  # always a bias on the q, k and v projections (Qwen2); others follow attention_bias
    attention_bias: bool = True  # config.json's attention_bias=true can be converted (false: refused)
    qk_norm: bool = False  # an RMSNorm on each head's q and k (Qwen3)
    moe: bool = False  # every decoder layer's MLP is routed experts (no shared expert)
    expert_ffn: str = "moe_intermediate_size"  # the config.json field sizing each expert's FFN
    topk_renormalised: bool = False  # the top-k router weights always sum to 1; else config.json's norm_topk_prob
    moe_block: str = "mlp"  # checkpoint name of a layer's MoE block: router <block>.gate, experts <block>.experts.<e>
    expert_names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")  # an expert's gate, up, down in it
    head_dim_field: bool = True  # config.json states head_dim (Qwen2's is always hidden_size / heads)
    sliding_window_field: bool = False  # config.json's sliding_window turns a window on whenever it is set (Mistral)


FAMILIES: dict[str, Family] = {
    family.model_type: family
    for family in (
        Family("llama", "LlamaConfig", attention_bias=False),
        Family("qwen2", "Qwen2Config", qkv_bias=True, head_dim_field=False),
        Family("qwen3", "Qwen3Config", qk_norm=True),
        Family("mistral", "MistralConfig", attention_bias=False, sliding_window_field=True),
        Family("qwen3_moe", "Qwen3MoeConfig", qk_norm=True, moe=True),
        Family(
            "mixtral",
            "MixtralConfig",
            attention_bias=False,
            moe=True,
            expert_ffn="intermediate_size",
            topk_renormalised=True,
            sliding_window_field=True,
            moe_block="block_sparse_moe",
            expert_names=("w1", "w3", "w2"),
        ),
    )
}
MODEL_TYPES = tuple(FAMILIES)


def family(model_type: str | None) -> Family | None:
    """The family of a config.json's model_type; None for one dagrl does not train."""
    return FAMILIES.get(model_type)  # type: ignore[arg-type]
