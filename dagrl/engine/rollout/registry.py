"""The rollout engines by name. `actor_rollout_ref.rollout.name` is one of ROLLOUT_ENGINES' names, and
`build_rollout` (dagrl/trainer/build.py) calls that entry's builder, `fn(setup: RolloutSetup) -> RolloutEngine`.

An entry names its builder as "module:function", imported when a run builds that engine: registering imports
nothing (vLLM, absent on CPU machines, only where a run builds the vllm engine). Torch-free: the schema declares
the key's choices as these names (dagrl/config/schema/actor_rollout_ref.py), so an engine registered before
pre-flight runs, from a `trainer.plugins` module, is accepted there and built by the same entry.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from dagrl.algo.registry import Registry

ROLLOUT_ENGINES = Registry("rollout engine", ("actor_rollout_ref.rollout.name",), "actor_rollout_ref.rollout")


@dataclass(frozen=True)
class RolloutSetup:
    """What a builder receives: the run's config and geometry, and what every engine needs resolved from them."""

    cfg: Any  # the whole config (dagrl.config.tree.Cfg); an engine's own keys: cfg.actor_rollout_ref.rollout
    shape: Any  # the run's RunShape (dagrl/config/shape.py): rollout_tp, max_model_len, pool
    tokenizer: Any
    device: Any  # this rank's torch.device
    model_path: str  # actor_rollout_ref.model.path, ~ expanded
    eos_token_ids: list[int]  # every id that ends a response: the tokenizer's and generation_config.json's
    pad_token_id: int
    dtype: str  # actor_rollout_ref.rollout.dtype as this machine resolves it: "float32" or "bfloat16"


ROLLOUT_ENGINES.register(
    "hf", "dagrl.engine.rollout.hf:build", "transformers generate, a full model per rank (CPU runs and tests)"
)
ROLLOUT_ENGINES.register(
    "vllm", "dagrl.engine.rollout.vllm:build", "vLLM in the trainer's own processes, TP over consecutive ranks (GPUs)"
)


def engine_declares(name: str, attr: str) -> bool:
    """Whether the rollout engine `name` declares `attr` true: a class of its builder's module says so
    (`supports_adapter`, `adapter_merged`: the RolloutEngine protocol's declarations). Imports that module."""
    entry = ROLLOUT_ENGINES.get(name)
    if entry is None:
        return False
    module = importlib.import_module(entry.target.split(":")[0])
    return any(
        isinstance(obj, type) and obj.__module__ == module.__name__ and getattr(obj, attr, False) is True
        for obj in vars(module).values()
    )
