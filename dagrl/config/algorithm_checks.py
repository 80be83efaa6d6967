"""Pre-flight of what the advantage estimator and the policy loss need from the rest of the config, read from their
declarations in dagrl/algo/catalog.py (the names themselves are the schema's choices, and a name a registry refuses
gets its reason from `choice_error`; sections.check_algorithm runs the rest)."""

from __future__ import annotations

from typing import Callable

from dagrl.algo.catalog import ADV_ESTIMATORS, REGISTRIES
from dagrl.config.errors import ConfigError
from dagrl.config.tree import Cfg


def choice_error(key: str, shown: str, allowed) -> str:
    """The line for `key`'s value `shown` outside `allowed`: the reason a registry refuses a name it knows (verl's
    remax), else the names it takes."""
    registry = next((r for r in REGISTRIES if key in r.keys), None)
    refused = registry and registry.refused.get(shown.strip("'"))
    if refused:
        return f"{key}={shown} {refused}"
    return f"{key}={shown} is not one of: {', '.join(map(str, allowed))}"


N_KEY = "actor_rollout_ref.rollout.n"
N_FIX = f"set {N_KEY} to 2 or more (verl's scripts use 5-16)"


def check_estimator(cfg: Cfg, graph_roles: Callable[[Cfg], set[str]]) -> None:
    """The estimator's batch fields (a critic's values: a node with role critic among `graph_roles(cfg)`) and its
    groups (rollout.n responses per prompt)."""
    name = cfg.algorithm.adv_estimator
    estimator = ADV_ESTIMATORS.get(name)
    if estimator is None:  # the schema's choices name it
        return
    if "values" in estimator.needs and "critic" not in graph_roles(cfg):
        others = ", ".join(e.name for e in ADV_ESTIMATORS if not e.needs)
        raise ConfigError(
            "algorithm.adv_estimator",
            f"algorithm.adv_estimator={name} needs the critic's values, but the graph has no node with "
            f"role critic: use the PPO graph (dag=ppo) or add a critic node, or pick an estimator "
            f"without a critic ({others})",
        )
    if "reward_baselines" in estimator.needs:  # the rollout node's one greedy response per prompt, made only there
        others = (
            (
                "actor_rollout_ref.rollout.multi_turn.enable",
                cfg.actor_rollout_ref.rollout.multi_turn.enable,
                "multi-turn trajectories",
            ),
            ("async_training.partial_rollout", cfg.async_training.partial_rollout, "partial rollout"),
            ("algorithm.filter_groups.enable", cfg.algorithm.filter_groups.enable, "dynamic sampling's extra prompts"),
        )
        clash = next(((key, what) for key, on, what in others if on is True), None)
        if clash:
            raise ConfigError(
                "algorithm.adv_estimator",
                f"algorithm.adv_estimator={name} takes its baseline from one greedy response per prompt, "
                f"which the rollout node generates for single-turn batches only, not for {clash[1]} "
                f"({clash[0]}=true): use grpo or rloo, or set {clash[0]}=false",
            )
    n = cfg.actor_rollout_ref.rollout.n  # n = 1: no group baseline, no variance
    loss = cfg.distillation.distillation_loss  # pure distillation replaces the task's advantage: no groups needed
    if (
        estimator.group
        and isinstance(n, int)
        and n < 2
        and not (cfg.distillation.enabled and not loss.use_task_rewards)
    ):
        raise ConfigError(
            N_KEY,
            f"{N_KEY}={n} gives algorithm.adv_estimator={name} groups of one response, and "
            f"{estimator.lone}; {N_FIX}, or use "
            f"algorithm.adv_estimator=reinforce_plus_plus, which needs no groups",
        )


def check_loss_options(cfg: Cfg) -> None:
    """What the schema's per-key ranges cannot say about the policy losses' options."""
    options = cfg.actor_rollout_ref.actor.policy_loss
    low, high = options.clip_cov_lb, options.clip_cov_ub
    key = "actor_rollout_ref.actor.policy_loss.clip_cov_lb"
    if all(isinstance(v, (int, float)) for v in (low, high)) and low >= high:
        raise ConfigError(
            key,
            f"{key}={low} must be below actor_rollout_ref.actor.policy_loss.clip_cov_ub={high} "
            f"(clip_cov drops the tokens whose covariance lies between them)",
        )
