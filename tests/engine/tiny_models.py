"""Tiny random HF causal LMs of every supported family, saved as safetensors dirs (no downloads)."""
from __future__ import annotations

from pathlib import Path

import torch

FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "qwen3_moe")


def make_config(family: str, num_layers: int = 2, tie: bool = False, vocab_size: int = 128):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config, Qwen3MoeConfig

    common = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=num_layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-6, tie_word_embeddings=tie, initializer_range=0.2)
    rope = {"rope_theta": 5000.0, "rope_type": "default"}
    if family == "llama":
        return LlamaConfig(**common, rope_parameters=rope)
    if family == "qwen2":
        return Qwen2Config(**common, rope_parameters=rope)
    if family == "qwen3":
        return Qwen3Config(**common, head_dim=16, rope_parameters=rope)
    if family == "mistral":
        return MistralConfig(**common, head_dim=16, sliding_window=None, rope_parameters=rope)
    if family == "qwen3_moe":
        return Qwen3MoeConfig(**common, head_dim=16, moe_intermediate_size=32, num_experts=4,
                              num_experts_per_tok=2, norm_topk_prob=True, rope_parameters=rope)
    raise ValueError(family)


def make_model_dir(path: Path, family: str = "llama", num_layers: int = 2, tie: bool = False,
                   seed: int = 0, vocab_size: int = 128) -> Path:
    """Save a random tiny model of `family` under `path` and return `path`."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(make_config(family, num_layers, tie, vocab_size), dtype=torch.float32)
    with torch.no_grad():  # norms are ones at init: randomise them so a wrong mapping shows
        for name, param in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                param.add_(0.1 * torch.randn_like(param))
    model.save_pretrained(path, safe_serialization=True)
    return Path(path)


def load_hf(path: Path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    return model.eval()
