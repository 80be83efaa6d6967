"""The actor's weights between the pools: weight buckets packed into byte tensors and back, and the rollout pool's
stand-in for the actor that the rollout node syncs from."""

from __future__ import annotations

import pickle
from typing import Iterator

import torch

from dagrl.engine.rollout.interface import WeightBucket


def pack_buckets(buckets: Iterator[WeightBucket]) -> tuple[list, list[torch.Tensor]]:
    """Each bucket as one byte tensor on the device its tensors are on, and the header that restores its
    (name, tensor) list."""
    header, flats = [], []
    for bucket in buckets:
        header.append([(name, str(t.dtype).removeprefix("torch."), tuple(t.shape)) for name, t in bucket])
        flats.append(torch.cat([t.detach().contiguous().view(-1).view(torch.uint8) for _, t in bucket]))
    return header, flats


def pickled(obj) -> torch.Tensor:
    return torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)


def unpack_bucket(entries: list, flat: torch.Tensor) -> WeightBucket:
    bucket, offset = [], 0
    for name, dtype, shape in entries:
        dtype = getattr(torch, dtype)
        nbytes = int(torch.Size(shape).numel()) * torch.empty((), dtype=dtype).element_size()
        bucket.append((name, flat[offset : offset + nbytes].view(dtype).view(shape)))
        offset += nbytes
    return bucket


class WeightInbox:
    """The rollout pool's stand-in for the actor: `export_weights` yields the last version received (once)."""

    def __init__(self) -> None:
        self.buckets: list[WeightBucket] = []

    def put(self, buckets: list[WeightBucket]) -> None:
        self.buckets = buckets

    def export_weights(self, bucket_bytes: int) -> Iterator[WeightBucket]:
        buckets, self.buckets = self.buckets, []  # the rollout holds its own copy from here on
        yield from buckets
