"""Tiny random HF causal LMs of every supported family, saved as safetensors dirs (no downloads)."""

from __future__ import annotations

from pathlib import Path

import torch

from dagrl.plan.presets import FAMILIES, hf_config, random_model

__all__ = ["FAMILIES", "make_config", "make_model_dir", "load_hf", "tie_router_weights"]


def make_config(family: str, num_layers: int = 2, tie: bool = False, vocab_size: int = 128):
    """The "tiny" preset of dagrl/plan/presets.py (one place for the family configs)."""
    return hf_config(family, "tiny", num_layers=num_layers, tie=tie, vocab_size=vocab_size)


def make_model_dir(
    path: Path, family: str = "llama", num_layers: int = 2, tie: bool = False, seed: int = 0, vocab_size: int = 128
) -> Path:
    """Save a random tiny model of `family` under `path` and return `path`."""
    model = random_model(family, "tiny", seed=seed, num_layers=num_layers, tie=tie, vocab_size=vocab_size)
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


def tie_router_weights(path: Path) -> Path:
    """Rewrite the MoE model at `path` so that every router's rows are equal up to 1e-4 noise, as an upcycled
    model's are: tokens near-tied between experts, which another precision routes elsewhere."""
    from safetensors.torch import load_file, save_file

    weights = load_file(path / "model.safetensors")
    g = torch.Generator().manual_seed(0)
    for name, tensor in weights.items():
        if name.endswith("mlp.gate.weight"):
            weights[name] = tensor[:1].expand_as(tensor) + 1e-4 * torch.randn(tensor.shape, generator=g)
    save_file({k: v.contiguous() for k, v in weights.items()}, path / "model.safetensors", metadata={"format": "pt"})
    return path
