"""Tiny random HF causal LMs of every supported family, saved as safetensors dirs (no downloads)."""

from __future__ import annotations

from pathlib import Path

import torch

from dagrl.plan.presets import FAMILIES, hf_config, random_model

__all__ = ["FAMILIES", "make_config", "make_model_dir", "load_hf"]


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
