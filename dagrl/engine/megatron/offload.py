"""Move tensors' storage to host memory and back, reusing the host buffers (pinned on GPU).

Works at storage level: Megatron's DDP params and grads are views into a few large buffers, and the optimizer's
main params may be views too. Freeing a storage (resize to 0) and refilling it later keeps every view valid.

Each store keeps its storages' contents in one host arena, allocated at the store's first offload (on a GPU shared
with the rollout: the first step's rollout switch) and page-locked by registering it with CUDA after several
threads have faulted its pages in (`PinnedHostMemory`). torch's pinned allocator (cudaHostAlloc, one block per
storage) rounds every block up to a power of two (a 6.1 GB grad buffer pins 8 GB of host memory) and faults and
locks the pages in one thread: the first switch of a Qwen3-1.7B actor, ~27 GB, took 16-30 s that way on an H100
host. One registration per store also keeps registrations from sharing a page (CUDA refuses a second one there).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

import torch

logger = logging.getLogger(__name__)

_FAULT_CHUNK = 256 << 20  # bytes each thread zeroes at a time: large enough that the GIL hand-offs cost nothing
_ALIGN = 512  # each storage's slot in the arena starts at a multiple of this (DMA-friendly)


class PinnedHostMemory:
    """Page-locked host memory of exactly `nbytes` (a uint8 tensor), unregistered from CUDA when this object goes."""

    def __init__(self, nbytes: int, threads: int | None = None) -> None:
        self.tensor = torch.empty(nbytes, dtype=torch.uint8)
        fault_in(self.tensor, threads)
        self.ptr, self.registered = self.tensor.data_ptr(), False
        if nbytes:
            error = int(torch.cuda.cudart().cudaHostRegister(self.ptr, nbytes, 0))
            if error != 0:
                raise RuntimeError(
                    f"cudaHostRegister of {nbytes} bytes of host memory failed (CUDA error {error}): "
                    f"the host may lack the RAM or the lockable memory (ulimit -l) for the offload"
                )
            self.registered = True

    def __del__(self) -> None:
        if self.registered and not sys.is_finalizing():
            torch.cuda.cudart().cudaHostUnregister(self.ptr)  # before the tensor's memory goes back to malloc


def fault_in(tensor: torch.Tensor, threads: int | None = None) -> None:
    """Touch every page of a fresh uint8 CPU tensor from several threads (torch releases the GIL inside zero_): CUDA
    then locks resident pages instead of faulting them in one by one. A torchrun rank usually runs with
    OMP_NUM_THREADS=1, so torch's own intra-op threads would not do it."""
    chunks = [tensor[start : start + _FAULT_CHUNK] for start in range(0, tensor.numel(), _FAULT_CHUNK)]
    workers = max(1, min(threads or min(8, os.cpu_count() or 1), len(chunks)))
    if workers == 1:
        for chunk in chunks:
            chunk.zero_()
        return
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(torch.Tensor.zero_, chunks))  # list(): re-raises a worker's exception here


def byte_view(storage: torch.UntypedStorage) -> torch.Tensor:
    """A flat uint8 tensor over the whole storage (for copies into and out of an arena's slot)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage, 0, (storage.nbytes(),), (1,))


class HostOffload:
    """A named set of storages that can be moved to host memory and back; idempotent in both directions."""

    def __init__(self, name: str, frozen: bool = False) -> None:
        self.name = name
        # frozen: the storages never change (a LoRA run's base), so the host copy of the first offload stays
        # current and every later offload only frees the device memory
        self.frozen, self._copied = frozen, False
        self._storages: list[torch.UntypedStorage] = []
        self._sizes: list[int] = []
        self._slots: list[torch.Tensor] = []  # each storage's bytes in the arena, once allocated
        self._arena: PinnedHostMemory | torch.Tensor | None = None  # owns the slots' memory (and its registration)
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
            self._sizes.append(storage.nbytes())

    def data_ptrs(self) -> set[int]:
        """Where the tracked storages live now (they move at every offload/onload cycle)."""
        if self.offloaded:
            raise RuntimeError(f"{self.name} is offloaded: its storages have no address")
        return {storage.data_ptr() for storage in self._storages}

    @property
    def nbytes(self) -> int:
        return sum(self._sizes)

    def _allocate(self, pinned: bool) -> None:
        """One host arena for every tracked storage at its current size (again when a storage was added or
        resized since the last one: the old arena is released after the new one exists)."""
        offsets, total = [], 0
        for size in self._sizes:
            offsets.append(total)
            total += -(-size // _ALIGN) * _ALIGN
        if pinned:
            torch.cuda.synchronize()  # no copy may still read the arena that this one replaces
            self._arena = PinnedHostMemory(total)
            memory = self._arena.tensor
        else:
            memory = self._arena = torch.empty(total, dtype=torch.uint8)
        self._slots = [memory[offset : offset + size] for offset, size in zip(offsets, self._sizes)]

    def offload(self) -> None:
        if self.offloaded:
            return
        is_cuda = any(s.device.type == "cuda" for s in self._storages)
        start, sizes = time.perf_counter(), [storage.nbytes() for storage in self._storages]
        allocate = len(self._slots) != len(sizes) or sizes != self._sizes
        if allocate:
            self._sizes = sizes
            self._allocate(pinned=is_cuda)
        if not (self.frozen and self._copied and not allocate):
            for storage, slot in zip(self._storages, self._slots):
                slot.copy_(byte_view(storage), non_blocking=is_cuda)
            if is_cuda:
                torch.cuda.synchronize()
            self._copied = True
        for storage in self._storages:
            storage.resize_(0)
        if is_cuda:  # hand the blocks back to the driver, so that vLLM (its own allocator) can use them
            torch.cuda.empty_cache()
        self.offloaded = True
        if allocate and self.nbytes >= 1 << 30:  # a large store's first offload: the first rollout switch pays it
            logger.info(
                "offloaded %s: %.1f GiB into newly allocated%s host memory in %.1f s",
                self.name,
                self.nbytes / 2**30,
                " page-locked" if is_cuda else "",
                time.perf_counter() - start,
            )
        else:
            logger.debug("offloaded %s: %d bytes", self.name, self.nbytes)

    def onload(self) -> None:
        if not self.offloaded:
            return
        for storage, slot, size in zip(self._storages, self._slots, self._sizes):
            storage.resize_(size)
            byte_view(storage).copy_(slot, non_blocking=storage.device.type == "cuda")
        self.offloaded = False
