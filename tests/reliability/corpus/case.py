"""What a case is: one thing a user gets wrong, the overrides (and files) that reproduce it, and what dagrl's
one error line must name (the key or file, and the fix); and the overrides several topics share.

Overrides are format strings: {ws} is the case's scratch directory, {model} a valid tiny model, {train} a valid
training file, {ckpt} the checkpoint directory (trainer.default_local_dir) that holds a complete checkpoint
(global_step_2) and a partial one (.tmp_global_step_3). `make(ws, paths)` writes the case's bad files first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


PREFLIGHT, RUNTIME = "pre-flight", "first step"
STARTUP = "start-up"  # once the tokenizer has read the prompts, before any model is built
MODEL_KEY = "actor_rollout_ref.model.path"
MEGATRON = "actor_rollout_ref.actor.megatron"


@dataclass(frozen=True)
class Paths:
    ws: Path
    model: Path
    train: str
    ckpt: Path


@dataclass(frozen=True)
class Case:
    id: str
    what: str  # the bad input, in words (docs/bad_inputs.md)
    overrides: tuple[str, ...] = ()
    expect: tuple[str, ...] = ()  # the error line contains each: the key or file, and the fix
    also: tuple[tuple[str, ...], ...] = ()  # several independent mistakes: each further error line, in order
    make: Callable[[Path, Paths], None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    code: int = 2
    found: str = PREFLIGHT  # RUNTIME: only once models are built and a step runs (slow suite)


WORLD = {"WORLD_SIZE": "2"}  # validate a 2-process launch without starting one (pre-flight reads WORLD_SIZE)
DECOUPLED = "actor_rollout_ref.actor.policy_loss.off_policy=decoupled"
MULTI_TURN = "actor_rollout_ref.rollout.multi_turn.enable=true"
LOG_PROBS = "actor_rollout_ref.rollout.calculate_log_probs=true"


def world(n: int) -> tuple[str, ...]:
    return (f"trainer.n_gpus_per_node={n}",)


MT_TOOLS = (MULTI_TURN, "actor_rollout_ref.rollout.multi_turn.tool_config_path={ws}/tools.yaml")
PPO_GAE = ("dag=ppo", "algorithm.adv_estimator=gae")
