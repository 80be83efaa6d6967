"""Pre-flight of algorithm.*: what the advantage estimator and the policy loss need from the rest of the config, read
from their declarations in dagrl/algo/catalog.py (the names themselves are the schema's choices), the KL controller
and DAPO's dynamic sampling."""

from __future__ import annotations

import logging

from dagrl.algo.catalog import ADV_ESTIMATORS
from dagrl.config.errors import ConfigError, require
from dagrl.config.preflight.actor import check_off_policy
from dagrl.config.preflight.graph import graph_roles
from dagrl.config.tree import Cfg


logger = logging.getLogger(__name__)

N_KEY = "actor_rollout_ref.rollout.n"
N_FIX = f"set {N_KEY} to 2 or more (verl's scripts use 5-16)"


def check_algorithm(cfg: Cfg) -> None:
    """Advantage-estimator, policy-loss, loss-aggregation and KL-controller keys (the names themselves are in
    the schema's choices)."""
    algorithm = cfg.algorithm
    check_estimator(cfg)
    n = cfg.actor_rollout_ref.rollout.n
    require(
        not (isinstance(n, int) and n < 2) or algorithm.filter_groups.enable is not True,
        N_KEY,
        f"algorithm.filter_groups.enable=true keeps the groups whose metric varies, but {N_KEY}={n} makes every "
        f"group one response, which never varies: no group would ever be kept; {N_FIX}, or set "
        f"algorithm.filter_groups.enable=false",
    )
    check_loss_options(cfg)
    check_clip_ratio(cfg)
    check_off_policy(cfg)  # truncated IS, decoupled PPO, sequence masking (the actor's)
    kl = algorithm.kl_ctrl
    require(
        kl.type != "adaptive" or kl.target_kl > 0,
        "algorithm.kl_ctrl.target_kl",
        f"algorithm.kl_ctrl.target_kl={kl.target_kl} must be > 0 with kl_ctrl.type=adaptive",
    )


def check_estimator(cfg: Cfg) -> None:
    """The estimator's batch fields (a critic's values: a node with role critic in the graph) and its
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


def check_clip_ratio(cfg: Cfg) -> None:
    """clip_ratio is only the default of clip_ratio_low and clip_ratio_high: with both set it applies nowhere."""
    from dagrl.config.schema.check import default_value

    actor, key = cfg.actor_rollout_ref.actor, "actor_rollout_ref.actor.clip_ratio"
    low, high = actor.clip_ratio_low, actor.clip_ratio_high
    require(
        low is None or high is None or actor.clip_ratio == default_value(key),
        key,
        f"{key}={actor.clip_ratio} has no effect: actor_rollout_ref.actor.clip_ratio_low={low} and "
        f"clip_ratio_high={high} are both set and replace it; drop {key}, or one of clip_ratio_low/high",
    )


def check_filter_groups(cfg: Cfg) -> None:
    """DAPO dynamic sampling: a filter metric that exists when the filter runs."""
    options = cfg.algorithm.filter_groups
    require(
        not (options.enable and options.metric == "seq_final_reward" and cfg.algorithm.use_kl_in_reward),
        "algorithm.filter_groups.metric",
        "algorithm.filter_groups.metric=seq_final_reward with algorithm.use_kl_in_reward=true: the KL penalty is "
        "applied after the reference log-probs, long after dynamic sampling; filter on seq_reward instead",
    )


def say_kl_twice(cfg: Cfg) -> None:
    """KL in the reward and in the loss both apply (verl allows it, with a notice): said, since one is usually meant."""
    if cfg.algorithm.use_kl_in_reward is True and cfg.actor_rollout_ref.actor.use_kl_loss is True:
        logger.warning(
            "algorithm.use_kl_in_reward=true and actor_rollout_ref.actor.use_kl_loss=true: the KL to the reference "
            "is penalised twice, in the reward (algorithm.kl_ctrl.kl_coef) and in the loss "
            "(actor_rollout_ref.actor.kl_loss_coef); set one of them false for a single penalty"
        )
