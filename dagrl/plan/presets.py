"""Model families and sizes as HF config fields: one place for the shapes that tools and tests build.

`scripts/init_random_model.py` saves random models from these, `tests/engine/tiny_models.py` builds its tiny
models from the "tiny" size, and the plan tests read the large presets without allocating a weight. Sizes are
named after the real checkpoints whose shapes they copy (Qwen3-0.6B/1.7B/4B/8B/14B/32B, Qwen2.5-0.5B,
Qwen3-30B-A3B, Qwen3-235B-A22B, Mixtral-8x7B); the family decides the attention details (Qwen2's QKV bias, Qwen3's
QK-norm).
Importing this module needs neither torch nor transformers; `hf_config` imports transformers when called.
"""

from __future__ import annotations

from typing import Any

from dagrl.models.families import FAMILIES as KINDS
from dagrl.models.families import MODEL_TYPES

FAMILIES = MODEL_TYPES  # dagrl/models/families.py

_TINY = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
    tie_word_embeddings=False,
    initializer_range=0.2,
    rms_norm_eps=1e-6,
    rope_theta=5000.0,
)
_QWEN = dict(vocab_size=151936, rms_norm_eps=1e-6, initializer_range=0.02, rope_theta=1_000_000.0)

# Dense shapes (any dense family).
DENSE_SIZES: dict[str, dict[str, Any]] = {
    "tiny": _TINY,
    "0.5b": dict(
        _QWEN,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
    ),
    "0.6b": dict(
        _QWEN,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        tie_word_embeddings=True,
    ),
    "1.7b": dict(
        _QWEN,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        tie_word_embeddings=True,
    ),
    "4b": dict(
        _QWEN,
        hidden_size=2560,
        intermediate_size=9728,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        tie_word_embeddings=True,
    ),
    "8b": dict(
        _QWEN,
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        tie_word_embeddings=False,
    ),
    "14b": dict(
        _QWEN,
        hidden_size=5120,
        intermediate_size=17408,
        num_hidden_layers=40,
        num_attention_heads=40,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        tie_word_embeddings=False,
    ),
    "32b": dict(
        _QWEN,
        hidden_size=5120,
        intermediate_size=25600,
        num_hidden_layers=64,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        tie_word_embeddings=False,
    ),
}
# Mixture-of-experts shapes (qwen3_moe); every layer is an MoE layer, intermediate_size is unused there.
MOE_SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(_TINY, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2),
    "30b-a3b": dict(
        _QWEN,
        hidden_size=2048,
        intermediate_size=6144,
        moe_intermediate_size=768,
        num_hidden_layers=48,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        num_experts=128,
        num_experts_per_tok=8,
        max_position_embeddings=40960,
        tie_word_embeddings=False,
    ),
    "235b-a22b": dict(
        _QWEN,
        hidden_size=4096,
        intermediate_size=12288,
        moe_intermediate_size=1536,
        num_hidden_layers=94,
        num_attention_heads=64,
        num_key_value_heads=4,
        head_dim=128,
        num_experts=128,
        num_experts_per_tok=8,
        max_position_embeddings=40960,
        tie_word_embeddings=False,
    ),
}


# Mixtral's fields: num_local_experts, and intermediate_size sizes each expert (Mixtral-8x7B's shape).
MIXTRAL_SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(_TINY, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2),
    "8x7b": dict(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        num_local_experts=8,
        num_experts_per_tok=2,
        max_position_embeddings=32768,
        tie_word_embeddings=False,
        initializer_range=0.02,
        rms_norm_eps=1e-5,
        rope_theta=1_000_000.0,
    ),
}


def sizes(family: str) -> dict[str, dict[str, Any]]:
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose one of {', '.join(FAMILIES)}")
    if not KINDS[family].moe:
        return DENSE_SIZES
    return MIXTRAL_SIZES if KINDS[family].config_class == "MixtralConfig" else MOE_SIZES


def config_fields(
    family: str, size: str, *, num_layers: int | None = None, vocab_size: int | None = None, tie: bool | None = None
) -> dict[str, Any]:
    """Keyword arguments of the family's transformers config class for `size` (overrides applied)."""
    table = sizes(family)
    if size not in table:
        raise ValueError(f"unknown size {size!r} for {family}; choose one of {', '.join(table)}")
    fields = dict(table[size])
    theta = fields.pop("rope_theta")
    fields["rope_parameters"] = {"rope_theta": theta, "rope_type": "default"}
    if num_layers is not None:
        fields["num_hidden_layers"] = num_layers
    if vocab_size is not None:
        fields["vocab_size"] = vocab_size
    if tie is not None:
        fields["tie_word_embeddings"] = tie
    if not KINDS[family].head_dim_field:  # Qwen2's is always hidden_size / heads: left out rather than mis-stated
        del fields["head_dim"]
    if KINDS[family].sliding_window_field:
        fields["sliding_window"] = None  # dagrl's converter supports full attention only
    if KINDS[family].moe and not KINDS[family].topk_renormalised:
        fields["norm_topk_prob"] = True
    return fields


def hf_config(family: str, size: str, **overrides: Any):
    """The transformers config object of `family` at `size` (see config_fields for the overrides)."""
    import transformers

    return getattr(transformers, KINDS[family].config_class)(**config_fields(family, size, **overrides))


def random_model(family: str, size: str, *, seed: int = 0, dtype: str = "float32", **overrides: Any):
    """A randomly initialised transformers causal LM of `family` at `size` (imports torch and transformers)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(hf_config(family, size, **overrides), dtype=getattr(torch, dtype))


def peak_logits(model: Any, factor: float) -> None:
    """Scale a causal LM's logits by `factor`, in place. A random init's logits are near-uniform (std ~0.02 *
    sqrt(hidden)): bf16 greedy decoding meets near-ties, and log-prob gaps are a fraction of a trained model's.
    x30 gives the 0.5b preset (4 layers, a 49k vocabulary) a top token of ~0.8 probability on average over random
    tokens, where x1 leaves it near 1/vocabulary. An untied head is scaled; a tied one is the input embedding as
    well, so there the final norm's gain is scaled instead: the same logits, the embedding and the tie unchanged
    (every family's final norm is an RMSNorm, x * weight)."""
    import torch

    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    with torch.no_grad():
        if head.weight is embedding.weight:
            model.model.norm.weight.mul_(factor)
        else:
            head.weight.mul_(factor)
