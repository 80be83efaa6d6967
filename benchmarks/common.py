"""Pieces the GPU benchmarks share: a config-only model directory every rank sees, and an actor engine on random
weights (the benchmarks measure speed, so no multi-GB checkpoint is written or read)."""
from __future__ import annotations

import tempfile
from typing import Any

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


