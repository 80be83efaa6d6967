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
        self._storages: list[torch.UntypedStorage] = []
        self._host: list[torch.UntypedStorage | None] = []
        self._sizes: list[int] = []
        self.offloaded = False

    def track(self, tensors: Iterable[torch.Tensor], exclude: set[int] | None = None) -> None:
        """Add the storages behind `tensors` (skipping storages whose data_ptr is in `exclude`)."""
        if self.offloaded:
            raise RuntimeError(f"cannot track new {self.name} tensors while offloaded")
        known = self.data_ptrs()
        for tensor in tensors:
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if storage.nbytes() == 0 or key in known or (exclude and key in exclude):
                continue
            known.add(key)
            self._storages.append(storage)
            self._host.append(None)
            self._sizes.append(storage.nbytes())

    def data_ptrs(self) -> set[int]:
        """Where the tracked storages live now (they move at every offload/onload cycle)."""
        if self.offloaded:
            raise RuntimeError(f"{self.name} is offloaded: its storages have no address")
        return {storage.data_ptr() for storage in self._storages}

    @property
    def nbytes(self) -> int:
        return sum(self._sizes)

    def offload(self) -> None:
        if self.offloaded:
            return
        is_cuda = any(s.device.type == "cuda" for s in self._storages)
        for index, storage in enumerate(self._storages):
            size = self._sizes[index] = storage.nbytes()
            host = self._host[index]
            if host is None or host.nbytes() != size:
                host = torch.empty(size, dtype=torch.uint8, device="cpu", pin_memory=is_cuda).untyped_storage()
                self._host[index] = host
            host.copy_(storage, non_blocking=is_cuda)
        if is_cuda:
            torch.cuda.synchronize()
        for storage in self._storages:
            storage.resize_(0)
        if is_cuda:  # hand the blocks back to the driver, so that vLLM (its own allocator) can use them
            torch.cuda.empty_cache()
        self.offloaded = True
        logger.debug("offloaded %s: %d bytes", self.name, self.nbytes)

    def onload(self) -> None:
        if not self.offloaded:
            return
        for storage, host, size in zip(self._storages, self._host, self._sizes):
            storage.resize_(size)
            storage.copy_(host, non_blocking=storage.device.type == "cuda")
        self.offloaded = False
