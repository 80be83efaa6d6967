"""The weights a sync sends, compared tensor by tensor with the checkpoint's safetensors as they pass on to the
rollout: the max absolute difference of each (in float32), and the names only one side has. An export of the
weights just loaded is expected to be exact, the checkpoint taken as rounded to the exported dtype; with an FP8
rollout, each tensor the sync quantizes is compared as its FP8 round trip, within that rounding (doctor/fp8.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

import torch

from dagrl.engine.rollout.interface import WeightBucket


@dataclass
class WeightCheck:
    """Fed by `tee`: per tensor max |export - checkpoint|, and what is missing on either side."""

    model_path: str
    tied: bool
    compare: bool = True  # off: pass the buckets through untouched (ranks other than the one that reports)
    max_diff: dict[str, float] = field(default_factory=dict)
    extra: list[str] = field(default_factory=list)  # exported, absent from the checkpoint
    missing: list[str] = field(default_factory=list)  # in the checkpoint, never exported
    fp8_layout: str | None = None  # an FP8 rollout's scale layout: its quantized tensors compared as round trips
    rounded: dict[str, float] = field(default_factory=dict)  # such a tensor -> the share of its rounding bound used

    def tee(self, buckets: Iterable[WeightBucket]) -> Iterator[WeightBucket]:
        from dagrl.engine.megatron.weights import SafetensorsDir
        from dagrl.engine.rollout.fp8 import is_quantized

        source = SafetensorsDir(self.model_path) if self.compare else None
        for bucket in buckets:
            if source is not None:
                for name, tensor in bucket:
                    if name not in source:
                        self.extra.append(name)
                        continue
                    # in the export's dtype: an fp32 checkpoint loaded into a bf16 actor is exact once rounded
                    want = source.get(name).to(tensor.dtype).to(torch.float32)
                    if tensor.shape != want.shape:
                        self.max_diff[name] = float("inf")
                    elif self.fp8_layout is not None and is_quantized(name, tensor.shape):
                        self.max_diff[name], self.rounded[name] = fp8_rounding(tensor.detach(), want, self.fp8_layout)
                    else:
                        got = tensor.detach().to("cpu", torch.float32)
                        self.max_diff[name] = float((got - want).abs().max())
            yield bucket
        if source is not None:
            self.missing = sorted(
                name
                for name in checkpoint_names(self.model_path)
                if name not in self.max_diff and not (self.tied and name == "lm_head.weight")
            )

    @property
    def differing(self) -> list[tuple[str, float]]:
        """The tensors that are not exact (an FP8 round trip: past its rounding), largest difference first."""
        within = {n for n, share in self.rounded.items() if share <= 1.0}
        inexact = ((n, d) for n, d in self.max_diff.items() if d > 0 and n not in within)
        return sorted(inexact, key=lambda item: -item[1])

    @property
    def exact(self) -> bool:
        return not self.differing and not self.extra and not self.missing


def fp8_rounding(exported: torch.Tensor, checkpoint: torch.Tensor, scales: str) -> tuple[float, float]:
    """The exported tensor's FP8 round trip against the checkpoint's (float32, host): the max absolute difference,
    and the largest share of its rounding bound that any element takes. Round to nearest moves x = w / scale by at
    most half of float8_e4m3fn's spacing: |x| * 2**-4 for a normal value (3 mantissa bits), 2**-10 among the
    subnormals (spacing 2**-9); so per element |w| * 2**-4 + scale * 2**-10, from the scales the sync computes.
    Above 1, the export is not the checkpoint's tensor."""
    from dagrl.engine.rollout import fp8

    quantized, scale = fp8.quantize(exported, scales)
    got = fp8.dequantize(quantized, scale, scales).cpu()
    each_scale = fp8.dequantize(torch.ones_like(quantized), scale, scales).cpu()
    bound = checkpoint.abs() * 2.0**-4 + each_scale * 2.0**-10
    diff = (got - checkpoint).abs()
    return float(diff.max()), float((diff / bound).max())


def checkpoint_names(model_path: str) -> list[str]:
    """Every tensor name in the safetensors files of `model_path` (sharded or not)."""
    from pathlib import Path

    from safetensors import safe_open

    names = []
    for path in sorted(Path(model_path).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            names.extend(handle.keys())
    return names
