"""Starting an in-process vLLM engine inside the trainer's process: the trainer's RNG streams untouched by the
engine's seeding, and the model class inspected in this process."""

from __future__ import annotations

import contextlib
import os
import random
from typing import Iterator

import numpy as np
import torch
import torch.distributed as dist


@contextlib.contextmanager
def external_launcher_env() -> Iterator[None]:
    """While vLLM's engine is built: RANK and LOCAL_RANK, which its external_launcher reads from the environment,
    from this process's group where no launcher exported them (a world of one made in-process; vLLM then joins that
    group). Removed after, so that no child process takes them for a launch of its own."""
    added: dict[str, str] = {}
    if dist.is_initialized():
        local = 0 if dist.get_world_size() == 1 else torch.cuda.current_device()  # a world of one: its node's only
        wanted = {"RANK": str(dist.get_rank()), "LOCAL_RANK": str(local)}
        added = {name: value for name, value in wanted.items() if name not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


class ProcessRngGuard:
    """`LLM(seed=…)` reseeds the whole process; the trainer's RNG streams must not notice."""

    def __enter__(self) -> None:
        self.states = (
            random.getstate(),
            np.random.get_state(),
            torch.get_rng_state(),
            torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        )

    def __exit__(self, *exc: object) -> None:
        python, numpy_state, cpu, cuda = self.states
        random.setstate(python)
        np.random.set_state(numpy_state)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


@contextlib.contextmanager
def inspect_model_in_process() -> Iterator[None]:
    """vLLM (0.26.0) inspects the model class in a fresh Python subprocess, which imports torch and vLLM again (27 s
    of a SmolLM2 engine's start on an H100 machine) so that an API server never initialises CUDA. This process has
    CUDA already and imports the same model module moments later to build the engine: inspect it here. (A cached
    inspection under VLLM_CACHE_ROOT skips both.) Where vLLM has no such function, nothing changes."""
    try:
        from vllm.model_executor.models import registry
    except ImportError:
        registry = None
    original = getattr(registry, "_run_in_subprocess", None)
    if original is None:
        yield
        return
    registry._run_in_subprocess = lambda fn: fn()
    try:
        yield
    finally:
        registry._run_in_subprocess = original
