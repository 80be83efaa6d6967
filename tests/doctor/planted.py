"""Mapping errors planted in the HF <-> Megatron mapping (dagrl/engine/megatron/weights.py, the import unless said),
each at a known stage, for the doctor to find: `PLANTS[name](monkeypatch)` applies one and returns the stage. Also a
torchrun entry point, so that a 2-process doctor run can carry one:

usage: torchrun --nproc-per-node 2 planted.py PLANT|none [python3 -m dagrl.doctor arguments ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dagrl.engine.megatron import weights  # noqa: E402 - after the checkout is on the path


def _rotary_interleave(weight: torch.Tensor, head_dim: int) -> torch.Tensor:
    """The q/k row order of Meta's original checkpoints (rotary halves interleaved), which HF's converter undoes:
    loading it as HF's order is the classic q/k permutation error."""
    heads = weight.shape[0] // head_dim
    return weight.view(heads, 2, head_dim // 2, -1).transpose(1, 2).reshape(weight.shape)


def _on_import(monkeypatch, change) -> None:
    """Route every shard the import takes through `change(rule, hf_tensors) -> hf_tensors`."""
    original = weights.local_shard

    def planted(rule, hf, hf_config):
        return original(rule, change(rule, list(hf), hf_config), hf_config)

    monkeypatch.setattr(weights, "local_shard", planted)


def qk_permutation(monkeypatch) -> str:
    def change(rule, hf, hf_config):
        if rule.kind == "qkv" and rule.hf_names[0] == "model.layers.1.self_attn.q_proj.weight":
            dim = hf[0].shape[0] // hf_config.num_attention_heads
            hf[0], hf[1] = _rotary_interleave(hf[0], dim), _rotary_interleave(hf[1], dim)
        return hf

    _on_import(monkeypatch, change)
    return "layer 1"


def swapped_gate_up(monkeypatch) -> str:
    def change(rule, hf, hf_config):
        return hf[::-1] if rule.kind == "fc1" and rule.hf_names[0].startswith("model.layers.0.mlp.") else hf

    _on_import(monkeypatch, change)
    return "layer 0"


def missing_bias(monkeypatch) -> str:
    """Qwen2's q/k/v biases of layer 1 left at zero."""

    def change(rule, hf, hf_config):
        if rule.hf_names[0] == "model.layers.1.self_attn.q_proj.bias":
            return [torch.zeros_like(t) for t in hf]
        return hf

    _on_import(monkeypatch, change)
    return "layer 1"


def untied_head(monkeypatch) -> str:
    """An untied model's output layer filled from the embedding, as if the two were tied."""
    original = weights.rule_for

    def planted(chunk, name, tied, model_type=None):
        return None if name == "output_layer.weight" else original(chunk, name, tied, model_type)

    monkeypatch.setattr(weights, "rule_for", planted)  # the import's; the export keeps the true rule
    return "output layer"


def wrong_expert_order(monkeypatch) -> str:
    """Local experts 0 <-> 1, 2 <-> 3, ... both ways (import and export): the weights round-trip exactly."""
    original = weights.local_expert

    def planted(suffix):
        found = original(suffix)
        return None if found is None else (found[0] ^ 1, found[1])

    monkeypatch.setattr(weights, "local_expert", planted)
    return "layer 0"


def tp_fc1_split(monkeypatch) -> str:
    """Layer 1's linear_fc1 split as one tensor [gate; up] over TP: right at TP1, wrong from TP2 on."""
    original = weights.local_shard

    def planted(rule, hf, hf_config):
        if rule.kind == "fc1" and rule.hf_names[0] == "model.layers.1.mlp.gate_proj.weight":
            rank, size, _ = weights.parallel_ranks(rule.expert)
            return torch.cat(hf).chunk(size, dim=0)[rank]
        return original(rule, hf, hf_config)

    monkeypatch.setattr(weights, "local_shard", planted)
    return "layer 1"


def export_gate_up(monkeypatch) -> str:
    """Layer 1's gate and up swapped in the export only: the actor is right, the rollout gets them wrong."""
    from dagrl.engine.megatron import weight_export

    original = weight_export.full_hf_tensors

    def planted(rule, parts, hf_config):
        tensors = original(rule, parts, hf_config)
        if rule.kind == "fc1" and rule.hf_names[0] == "model.layers.1.mlp.gate_proj.weight":
            (gate, first), (up, second) = tensors
            tensors = [(gate, second), (up, first)]
        return tensors

    monkeypatch.setattr(weight_export, "full_hf_tensors", planted)
    return "layer 1"


PLANTS = {
    "qk_permutation": qk_permutation,
    "swapped_gate_up": swapped_gate_up,
    "missing_bias": missing_bias,
    "untied_head": untied_head,
    "wrong_expert_order": wrong_expert_order,
    "tp_fc1_split": tp_fc1_split,
    "export_gate_up": export_gate_up,
}


if __name__ == "__main__":
    import pytest

    if sys.argv[1] != "none":
        PLANTS[sys.argv[1]](pytest.MonkeyPatch())
    from dagrl.doctor.__main__ import main

    main(sys.argv[2:])
