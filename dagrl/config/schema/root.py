"""The whole config as one typed tree: a section a group of conf/dagrl.yaml's defaults, in that order, and
`keys()`, every declared key by its dotted name (what pre-flight checks, what the YAML and the reference are
written from)."""

from __future__ import annotations

import functools
import re
import typing
from typing import Any
from dataclasses import dataclass

from dagrl.config.schema.actor_rollout_ref import ActorRolloutRef
from dagrl.config.schema.algorithm import Algorithm
from dagrl.config.schema.async_training import AsyncTraining
from dagrl.config.schema.critic import Critic
from dagrl.config.schema.custom_reward_function import CustomRewardFunction
from dagrl.config.schema.dag import Dag
from dagrl.config.schema.data import Data
from dagrl.config.schema.distillation import Distillation
from dagrl.config.schema.global_profiler import GlobalProfiler
from dagrl.config.schema.reward_model import RewardModel
from dagrl.config.schema.rollout import RolloutPool
from dagrl.config.schema.spec import Key, Section, build, keys_of, section, section_docs
from dagrl.config.schema.trainer import Trainer


@dataclass(frozen=True)
class Config(Section):
    data: Data = section(Data, "prompts")
    actor_rollout_ref: ActorRolloutRef = section(ActorRolloutRef, "actor, reference and rollout engine")
    critic: Critic = section(Critic, "the PPO value model")
    reward_model: RewardModel = section(RewardModel, "rule-based rewards")
    custom_reward_function: CustomRewardFunction = section(CustomRewardFunction, "your own scorer")
    algorithm: Algorithm = section(Algorithm, "advantage estimation and KL control")
    distillation: Distillation = section(Distillation, "on-policy distillation")
    async_training: AsyncTraining = section(AsyncTraining, "asynchronous training")
    rollout: RolloutPool = section(RolloutPool, "the rollout pool of separate pools")
    trainer: Trainer = section(Trainer, "the loop, checkpoints, logging and launch")
    global_profiler: GlobalProfiler = section(GlobalProfiler, "per-step profiler")
    dag: Dag = section(Dag, "the step's node graph")


SECTIONS: dict[str, type] = typing.get_type_hints(Config)  # {group: its section's class}


@functools.lru_cache(maxsize=1)
def keys() -> dict[str, Key]:
    """{dotted key: Key} of every declared key, in conf/'s order."""
    return {path.lstrip("."): key for path, key in keys_of(Config, "").items()}


@functools.lru_cache(maxsize=1)
def sections() -> dict[str, str]:
    """{dotted section: its one-line doc} of every section and subsection."""
    return {path.lstrip("."): doc for path, doc in section_docs(Config, "").items()}


_INTERPOLATION = re.compile(r"^\$\{([A-Za-z0-9_.]+)\}$")


@functools.lru_cache(maxsize=1)
def interpolated_defaults() -> dict[str, str]:
    """Keys whose declared default is exactly `${other.key}` -> that other key (e.g. critic.megatron.seed ->
    actor_rollout_ref.actor.megatron.seed)."""
    found = {path: _INTERPOLATION.match(key.default) for path, key in keys().items() if isinstance(key.default, str)}
    return {path: match.group(1) for path, match in found.items() if match}


@functools.lru_cache(maxsize=1)
def followers() -> dict[str, list[str]]:
    """{key: the keys whose default is exactly `${key}`} (critic.shuffle follows actor_rollout_ref.actor.shuffle)."""
    found: dict[str, list[str]] = {}
    for key, source in interpolated_defaults().items():
        found.setdefault(source, []).append(key)
    return found


def freeform_maps() -> tuple[str, ...]:
    """Maps whose keys are the user's own: `+<map>.<key>=value` adds to them and reaches the code that reads them."""
    return tuple(path for path, key in keys().items() if key.kind == "dict")


def typed(cfg: Any) -> Config:
    """The composed config (a Cfg or plain data) as the typed tree nodes read; reads are recorded as Cfg's are."""
    return build(Config, cfg.snapshot() if hasattr(cfg, "snapshot") else cfg)
