"""Move tensors' storage to host memory and back, reusing the host buffers (pinned on GPU).

Works at storage level: Megatron's DDP params and grads are views into a few large buffers, and the optimizer's
main params may be views too. Freeing a storage (resize to 0) and refilling it later keeps every view valid.
"""
from __future__ import annotations

import logging
from typing import Iterable

import torch

logger = logging.getLogger(__name__)


class HostOffload:
    """A named set of storages that can be moved to host memory and back; idempotent in both directions."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._storages: dict[int, torch.UntypedStorage] = {}
        self._host: dict[int, torch.UntypedStorage] = {}
        self._sizes: dict[int, int] = {}
        self.offloaded = False

    def track(self, tensors: Iterable[torch.Tensor], exclude: set[int] | None = None) -> None:
        """Add the storages behind `tensors` (skipping storages whose data_ptr is in `exclude`)."""
        if self.offloaded:
            raise RuntimeError(f"cannot track new {self.name} tensors while offloaded")
        for tensor in tensors:
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if storage.nbytes() == 0 or (exclude and key in exclude):
                continue
            self._storages.setdefault(key, storage)

    def data_ptrs(self) -> set[int]:
        return set(self._storages)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes() if not self.offloaded else self._sizes[k] for k, s in self._storages.items())

    def offload(self) -> None:
        if self.offloaded:
            return
        for key, storage in self._storages.items():
            size = storage.nbytes()
            host = self._host.get(key)
            if host is None or host.nbytes() != size:
                host = torch.empty(size, dtype=torch.uint8, device="cpu",
                                   pin_memory=storage.device.type == "cuda").untyped_storage()
                self._host[key] = host
            host.copy_(storage, non_blocking=storage.device.type == "cuda")
            self._sizes[key] = size
        if any(s.device.type == "cuda" for s in self._storages.values()):
            torch.cuda.synchronize()
        for storage in self._storages.values():
            storage.resize_(0)
        self.offloaded = True
        logger.debug("offloaded %s: %d bytes", self.name, sum(self._sizes.values()))

    def onload(self) -> None:
        if not self.offloaded:
            return
        for key, storage in self._storages.items():
            storage.resize_(self._sizes[key])
            storage.copy_(self._host[key], non_blocking=storage.device.type == "cuda")
        self.offloaded = False
