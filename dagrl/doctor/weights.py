"""The weights a sync sends, compared tensor by tensor with the checkpoint's safetensors as they pass on to the
rollout: the max absolute difference of each (in float32), and the names only one side has. An export of the
weights just loaded is expected to be exact, the checkpoint taken as rounded to the exported dtype."""

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

    def tee(self, buckets: Iterable[WeightBucket]) -> Iterator[WeightBucket]:
        from dagrl.engine.megatron.weights import SafetensorsDir

        source = SafetensorsDir(self.model_path) if self.compare else None
        for bucket in buckets:
            if source is not None:
                for name, tensor in bucket:
                    if name not in source:
                        self.extra.append(name)
                        continue
                    # in the export's dtype: an fp32 checkpoint loaded into a bf16 actor is exact once rounded
                    want = source.get(name).to(tensor.dtype).to(torch.float32)
                    got = tensor.detach().to("cpu", torch.float32)
                    self.max_diff[name] = float((got - want).abs().max()) if got.shape == want.shape else float("inf")
            yield bucket
        if source is not None:
            self.missing = sorted(
                name
                for name in checkpoint_names(self.model_path)
                if name not in self.max_diff and not (self.tied and name == "lm_head.weight")
            )

    @property
    def differing(self) -> list[tuple[str, float]]:
        """The tensors that are not exact, largest difference first."""
        return sorted(((n, d) for n, d in self.max_diff.items() if d > 0), key=lambda item: -item[1])

    @property
    def exact(self) -> bool:
        return not self.differing and not self.extra and not self.missing


def checkpoint_names(model_path: str) -> list[str]:
    """Every tensor name in the safetensors files of `model_path` (sharded or not)."""
    from pathlib import Path

    from safetensors import safe_open

    names = []
    for path in sorted(Path(model_path).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            names.extend(handle.keys())
    return names
