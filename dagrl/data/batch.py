"""The one batch type that flows between graph nodes.

A `Batch` is a set of equally long columns: torch tensors `[B, ...]` and non-tensor columns (numpy object
arrays, e.g. `data_source`, `reward_model`, `uid`). It is a small own class rather than `tensordict` because
nodes need non-tensor columns, and those are second-class in tensordict. Call parameters (temperature,
micro-batch sizes) are never stored in a batch: they are arguments of the functions that need them.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch


class Batch:
    """Columns of equal length B: tensors `[B, ...]` and object columns (numpy arrays of length B)."""

    def __init__(self, tensors: dict[str, torch.Tensor] | None = None, columns: dict[str, Any] | None = None) -> None:
        self.tensors: dict[str, torch.Tensor] = {}
        self.columns: dict[str, np.ndarray] = {}
        for key, value in (tensors or {}).items():
            self[key] = value
        for key, value in (columns or {}).items():
            self[key] = value

    # ---- column access -------------------------------------------------------------------------
    def __len__(self) -> int:
        for value in self.tensors.values():
            return int(value.shape[0])
        for value in self.columns.values():
            return len(value)
        return 0

    def __contains__(self, key: str) -> bool:
        return key in self.tensors or key in self.columns

    def __getitem__(self, key: str) -> Any:
        if key in self.tensors:
            return self.tensors[key]
        if key in self.columns:
            return self.columns[key]
        raise KeyError(f"batch has no column {key!r}; it has {sorted(self.keys())}")

    def __setitem__(self, key: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            self.columns.pop(key, None)
            self.tensors[key] = value
        else:
            array = np.empty(len(value), dtype=object)
            array[:] = list(value)
            self.tensors.pop(key, None)
            self.columns[key] = array
        length = len(value)
        if len(self) != length:
            raise ValueError(f"column {key!r} has length {length}, the batch has {len(self)}")

    def pop(self, key: str) -> Any:
        return self.tensors.pop(key) if key in self.tensors else self.columns.pop(key)

    def keys(self) -> list[str]:
        return [*self.tensors, *self.columns]

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    # ---- row operations ------------------------------------------------------------------------
    def select(self, index: Sequence[int] | np.ndarray | torch.Tensor) -> "Batch":
        """Rows at `index` (in that order)."""
        idx = np.asarray(index.tolist() if isinstance(index, torch.Tensor) else index, dtype=np.int64)
        out = Batch()
        for key, value in self.tensors.items():
            out.tensors[key] = value[torch.as_tensor(idx, device=value.device)]
        for key, value in self.columns.items():
            out.columns[key] = value[idx]
        return out

    def slice(self, start: int, stop: int) -> "Batch":
        return self.select(np.arange(start, min(stop, len(self))))

    def split(self, size: int) -> list["Batch"]:
        """Consecutive pieces of `size` rows (the last one may be shorter)."""
        if size <= 0:
            raise ValueError(f"split size must be positive, got {size}")
        return [self.slice(start, start + size) for start in range(0, len(self), size)]

    def chunk(self, parts: int) -> list["Batch"]:
        """`parts` consecutive pieces of equal size; the length must divide."""
        if len(self) % parts:
            raise ValueError(f"cannot chunk a batch of {len(self)} rows into {parts} equal parts")
        return self.split(len(self) // parts)

    def repeat_interleave(self, repeats: int) -> "Batch":
        """Each row repeated `repeats` times in place: rows a, b -> a, a, b, b."""
        return self.select(np.repeat(np.arange(len(self)), repeats))

    def to(self, device: torch.device | str) -> "Batch":
        out = Batch()
        out.tensors = {key: value.to(device) for key, value in self.tensors.items()}
        out.columns = dict(self.columns)
        return out

    def union(self, other: "Batch") -> "Batch":
        """A new batch with the columns of both (other's win on a name clash)."""
        if len(self) and len(other) and len(self) != len(other):
            raise ValueError(f"cannot join batches of {len(self)} and {len(other)} rows")
        out = Batch()
        out.tensors = {**self.tensors, **other.tensors}
        out.columns = {**self.columns, **other.columns}
        return out

    @staticmethod
    def concat(batches: Iterable["Batch"]) -> "Batch":
        """Rows of all batches, in order; all must have the same column names."""
        batches = [b for b in batches if len(b)]
        if not batches:
            return Batch()
        names = set(batches[0].keys())
        for b in batches[1:]:
            if set(b.keys()) != names:
                raise ValueError(f"cannot concat batches with columns {sorted(names)} and {sorted(b.keys())}")
        out = Batch()
        for key in batches[0].tensors:
            out.tensors[key] = torch.cat([b.tensors[key] for b in batches])
        for key in batches[0].columns:
            out.columns[key] = np.concatenate([b.columns[key] for b in batches])
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __repr__(self) -> str:
        shapes = {k: tuple(v.shape) for k, v in self.tensors.items()}
        return f"Batch(len={len(self)}, tensors={shapes}, columns={list(self.columns)})"
