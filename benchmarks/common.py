"""Pieces the GPU benchmarks share: a config-only model directory every rank sees, an actor engine on random
weights (the benchmarks measure speed, so no multi-GB checkpoint is written or read), and a CPU-time profile."""

from __future__ import annotations

import cProfile
import io
import pstats
import tempfile
from typing import Any, Callable

import torch.distributed as dist

from dagrl.engine.base import MegatronEngineSpec


def shared_config_dir(config: Any, prefix: str) -> str:
    """Rank 0 saves `config` (an HF config) into a fresh directory; every rank gets its path. Collective."""
    path = [tempfile.mkdtemp(prefix=prefix) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(path, src=0)
    if dist.get_rank() == 0:
        config.save_pretrained(path[0])
    dist.barrier()
    return path[0]


def random_actor(spec: MegatronEngineSpec):
    """The actor engine of `spec` with Megatron's random initialisation: the HF weight import is skipped."""
    import dagrl.engine.megatron.weights as weights
    from dagrl.engine.megatron.actor import MegatronActorEngine

    real_import = weights.import_hf_weights
    weights.import_hf_weights = lambda *args, **kwargs: None
    try:
        return MegatronActorEngine(spec)
    finally:
        weights.import_hf_weights = real_import


def cpu_profile(fn: Callable[[], Any], sort: str, *restrictions: Any) -> str:
    """cProfile's table of one call of `fn`, sorted by `sort` and cut by pstats `restrictions` (regex, count)."""
    profiler = cProfile.Profile()
    profiler.runcall(fn)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats(sort).print_stats(*restrictions)
    return text.getvalue()
