"""The HF tensor names and shapes of a model directory, read from its safetensors headers (no tensor data).

A rollout checks every synced tensor against it before loading, so a wrong name or shape fails loudly with
that name instead of leaving the engine half-loaded or silently ignoring a tensor.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

from dagrl.engine.rollout.fp8 import scale_shape_of


def read_safetensors_shapes(model_dir: str) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(
            f"no *.safetensors in {model_dir}: the rollout needs the HF model's weight files "
            f"(their headers give the tensor names and shapes)"
        )
    for file in files:
        with open(file, "rb") as handle:
            header_size = struct.unpack("<Q", handle.read(8))[0]
            header = json.loads(handle.read(header_size))
        for name, entry in header.items():
            if name != "__metadata__":
                shapes[name] = tuple(entry["shape"])
    return shapes


class WeightManifest:
    def __init__(self, model_dir: str, shapes: dict[str, tuple[int, ...]] | None = None) -> None:
        """From `model_dir`'s safetensors headers, or from `shapes` when given (a config-only random model)."""
        self.shapes = read_safetensors_shapes(model_dir) if shapes is None else shapes
        self.model_dir = model_dir

    def check(self, name: str, tensor: torch.Tensor) -> None:
        expected = self.shapes.get(name)
        if expected is None:  # an FP8 rollout's scale, beside its weight
            expected = scale_shape_of(name, self.shapes)
        if expected is None:
            raise KeyError(f"weight sync sent {name!r}, which {self.model_dir} does not have")
        if tuple(tensor.shape) != expected:
            raise ValueError(f"weight sync: {name} has shape {tuple(tensor.shape)}, {self.model_dir} has {expected}")
