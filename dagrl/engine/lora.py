"""What the actor's adapters are (LoraSpec), and a LoRA adapter as it travels from the actor to a rollout
engine or to disk.

The actor turns its own (fused, sharded) adapter parameters into this one shape; every consumer —
the hf and vLLM rollouts, the PEFT directory writer, the model merger — reads only this.
"""

from dataclasses import dataclass

import torch

from dagrl.config.schema.lora import MEGATRON_TO_HF


@dataclass(frozen=True)
class LoraAdapter:
    """Per-module LoRA tensors under the PEFT names of the HF model.

    ``tensors`` maps e.g. ``base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight`` (shape
    ``[rank, in]``) and the matching ``...lora_B.weight`` (shape ``[out, rank]``); ``target_modules``
    are HF module names (``q_proj``, ``gate_proj``, ...). The adapted weight is W + scaling·B·A.
    """

    tensors: dict[str, torch.Tensor]
    rank: int
    alpha: float
    target_modules: tuple[str, ...]

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank


@dataclass(frozen=True)
class LoraSpec:
    """A model's adapters (actor or critic): rank, alpha, dropout, the targeted linears (Megatron names), and
    whether the rollout serves them merged into the weights (`merged`: dagrl.config.derived.lora_served_merged), in
    which case the actor's forward computes with those very merged weights."""

    rank: int
    alpha: float
    dropout: float = 0.0
    targets: tuple[str, ...] = tuple(MEGATRON_TO_HF)
    merged: bool = False

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank
