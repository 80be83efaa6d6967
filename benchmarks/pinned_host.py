"""Seconds to page-lock host memory for the actor's offload, and the copy speed into it: torch's pinned allocator
against dagrl's PinnedHostMemory (exact size, pages faulted in by threads, then cudaHostRegister).

usage (GPU machine): python3 benchmarks/pinned_host.py [--sizes 1 4 16] [--threads 8]
A colocated actor moves its params, grads and optimizer state to host memory at every rollout switch; the first
switch allocates and locks that memory (~27 GB for a Qwen3-1.7B actor on one GPU). Rows per size in GiB:
  torch pin_memory      torch.empty(pin_memory=True): cudaHostAlloc of the size rounded up to a power of two
  register, no fault-in torch.empty + cudaHostRegister: the driver faults the pages in while locking them
  dagrl                 PinnedHostMemory: --threads threads zero the pages, then cudaHostRegister (split shown)
and the GB/s of a device-to-host and a host-to-device copy of min(size, 4 GiB) through each buffer (a buffer that is
not really page-locked copies at a fraction of that). Each allocation is freed before the next, largest first.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dagrl.engine.megatron.offload import PinnedHostMemory, fault_in


def copy_rates(host: torch.Tensor) -> tuple[float, float]:
    """GB/s device-to-host and host-to-device through the first min(size, 4 GiB) bytes of `host`."""
    size = min(host.numel(), 4 << 30)
    device = torch.empty(size, dtype=torch.uint8, device="cuda")
    rates = []
    for dst, src in ((host[:size], device), (device, host[:size])):
        dst.copy_(src, non_blocking=True)  # warm-up
        torch.cuda.synchronize()
        start = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        rates.append(size / (time.perf_counter() - start) / 1e9)
    return rates[0], rates[1]


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def register_only(nbytes: int) -> torch.Tensor:
    tensor = torch.empty(nbytes, dtype=torch.uint8)
    error = int(torch.cuda.cudart().cudaHostRegister(tensor.data_ptr(), nbytes, 0))
    if error != 0:
        raise RuntimeError(f"cudaHostRegister failed: CUDA error {error}")
    return tensor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[16, 4, 1], help="GiB per allocation")
    parser.add_argument("--threads", type=int, default=8, help="dagrl's fault-in threads")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/pinned_host.py needs a CUDA GPU (page-locking is a CUDA call)")
    torch.cuda.init()
    print("| GiB | path | seconds | GiB/s locked | fault-in s | register s | D2H GB/s | H2D GB/s | is_pinned |")
    print("|---|---|---|---|---|---|---|---|---|")
    for gib in sorted(args.sizes, reverse=True):
        nbytes = int(gib * (1 << 30))
        seconds, host = timed(lambda: torch.empty(nbytes, dtype=torch.uint8, pin_memory=True))
        rows = [("torch pin_memory", seconds, "-", "-", host)]
        seconds, plain = timed(lambda: register_only(nbytes))
        rows.append(("register, no fault-in", seconds, "-", "-", plain))
        seconds, owner = timed(lambda: PinnedHostMemory(nbytes, args.threads))
        rows.append(("dagrl PinnedHostMemory", seconds, None, None, owner.tensor))
        for name, seconds, fault, register, buffer in rows:
            d2h, h2d = copy_rates(buffer)
            pinned = buffer.is_pinned()
            if fault is None:  # split dagrl's: fault-in alone on a fresh buffer of the same size
                fault_s, _ = timed(lambda: fault_in(torch.empty(nbytes, dtype=torch.uint8), args.threads))
                fault, register = f"{fault_s:.2f}", f"{max(seconds - fault_s, 0.0):.2f}"
            print(
                f"| {gib:g} | {name} | {seconds:.2f} | {gib / seconds:.1f} | {fault} | {register} | {d2h:.1f} | "
                f"{h2d:.1f} | {pinned} |",
                flush=True,
            )
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaHostUnregister(plain.data_ptr())
        del rows, host, plain, owner, buffer
        torch.cuda.empty_cache()
        release = getattr(torch.accelerator, "empty_host_cache", None)  # torch >= 2.12; else the block stays cached
        if release is not None:
            release()


if __name__ == "__main__":
    main()
