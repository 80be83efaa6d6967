"""The machine dagrl.plan runs on: whether the trainer would find a GPU here (read without importing torch) and how
much memory its processes share when it would not."""

from __future__ import annotations

import glob
import os
import subprocess
from pathlib import Path

# cgroup v2, then v1: a container's limit ("max", or v1's near-2^63 figure, when there is none)
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def has_gpu() -> bool:
    """Whether torch.cuda would find a device here: an NVIDIA device node or ROCm's, unless CUDA_VISIBLE_DEVICES
    hides them all."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/kfd")


def gpu_gib() -> float | None:
    """The memory of the smallest GPU this run would use, in GiB, as nvidia-smi reports it (torch's figure is
    about 0.5 % lower); None where nvidia-smi is missing or fails. CUDA_VISIBLE_DEVICES indices narrow the list."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    sizes = dict(line.split(",")[:2] for line in out.strip().splitlines() if line.count(",") == 1)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").replace(" ", "")
    if visible and all(part.isdigit() for part in visible.split(",")):
        sizes = {index: size for index, size in sizes.items() if index.strip() in visible.split(",")}
    mib = [float(size) for size in sizes.values() if size.strip().replace(".", "", 1).isdigit()]
    return min(mib) / 1024 if mib else None


def ram_gib() -> float:
    """This machine's memory in GiB: its physical RAM, or the container's memory limit where that is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit in map(Path, _CGROUP_LIMITS):
        try:
            text = limit.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total / (1 << 30)
