"""Random LoRA adapters over a tiny HF model, and the same model with them merged by hand."""

from __future__ import annotations

import copy

import torch

from dagrl.engine.lora import LoraAdapter

ALL_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def random_adapter(model, rank: int = 4, alpha: float = 8.0, targets=ALL_TARGETS, seed: int = 0) -> LoraAdapter:
    """An adapter on every `targets` nn.Linear of `model` with both A and B random (PEFT starts B at zero, which
    would hide a B·A merged the wrong way round)."""
    g = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets:
            prefix = f"base_model.model.{name}"
            tensors[f"{prefix}.lora_A.weight"] = 0.1 * torch.randn(rank, module.in_features, generator=g)
            tensors[f"{prefix}.lora_B.weight"] = 0.1 * torch.randn(module.out_features, rank, generator=g)
    return LoraAdapter(tensors=tensors, rank=rank, alpha=alpha, target_modules=tuple(targets))


def merged_by_hand(model, adapter: LoraAdapter):
    """A copy of `model` whose adapted weights are W + (alpha/rank)·B·A, written out here without dagrl's merge."""
    merged = copy.deepcopy(model)
    params = dict(merged.named_parameters())
    with torch.no_grad():
        for name, a in adapter.tensors.items():
            if name.endswith(".lora_A.weight"):
                module = name.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
                b = adapter.tensors[name.replace(".lora_A.", ".lora_B.")]
                weight = params[module + ".weight"]
                weight.copy_((weight.float() + adapter.alpha / adapter.rank * (b @ a)).to(weight.dtype))
    return merged


def logits(model, input_ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=input_ids).logits.float()
