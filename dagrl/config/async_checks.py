"""Pre-flight rules of asynchronous training (async_training.*) and of the off-policy correction the actor applies to
stale samples. The pools' sizes are checked where the world size is (config/validate.py)."""

from __future__ import annotations

from dagrl.config.errors import require
from dagrl.config.tree import Cfg


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_async_training(cfg: Cfg) -> None:
    """async_training.*: partial rollout's keys, and the settings it cannot run with yet."""
    options = cfg.async_training
    require(
        isinstance(options.partial_rollout, bool),
        "async_training.partial_rollout",
        f"async_training.partial_rollout={options.partial_rollout!r} must be true or false",
    )
    ratio = options.oversample_ratio
    require(
        isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and ratio >= 1,
        "async_training.oversample_ratio",
        f"async_training.oversample_ratio={ratio!r} must be a number >= 1",
    )
    require(
        options.partial_rollout or ratio == 1,
        "async_training.oversample_ratio",
        f"async_training.oversample_ratio={ratio} oversamples only with async_training.partial_rollout=true: "
        f"set that too, or drop oversample_ratio",
    )
    require(
        options.partial_rollout or options.restart_stale is not False,
        "async_training.restart_stale",
        "async_training.restart_stale=false only changes what partial rollout does with groups older than K: set "
        "async_training.partial_rollout=true too, or drop restart_stale",
    )
    staleness = options.max_staleness
    require(
        isinstance(staleness, int) and not isinstance(staleness, bool) and staleness >= 0,
        "async_training.max_staleness",
        f"async_training.max_staleness={staleness!r} must be an integer >= 0",
    )
    trigger, key = options.trigger_parameter_sync_step, "async_training.trigger_parameter_sync_step"
    require(
        isinstance(trigger, int) and not isinstance(trigger, bool) and trigger >= 1,
        key,
        f"{key}={trigger!r} must be an integer >= 1",
    )
    # a colocated run first: there the staleness fix would only lead to this line
    require(
        trigger == 1 or not cfg.actor_rollout_ref.hybrid_engine,
        key,
        f"{key}={trigger}: a colocated run syncs the rollout's weights every step; pushes every N steps need "
        f"separate pools (actor_rollout_ref.hybrid_engine=false): set it to 1",
    )
    require(
        staleness >= trigger - 1,
        key,
        f"{key}={trigger} with async_training.max_staleness={staleness} would "
        f"deadlock (samples wait longer than K versions between pushes): set max_staleness >= {trigger - 1}",
    )
    require(
        not (options.partial_rollout and cfg.algorithm.filter_groups.enable),
        "async_training.partial_rollout",
        "async_training.partial_rollout=true with algorithm.filter_groups.enable=true (dynamic sampling) is not "
        "supported yet: turn one of them off",
    )


def check_off_policy(cfg: Cfg) -> None:
    """Truncated importance sampling, decoupled PPO and sequence masking (dagrl/algo/off_policy.py); the off_policy
    name is in the schema's choices."""
    actor = cfg.actor_rollout_ref.actor
    behaviour = cfg.actor_rollout_ref.rollout.calculate_log_probs is True or cfg.async_training.partial_rollout is True
    fix = "set actor_rollout_ref.rollout.calculate_log_probs=true"
    cap, key = actor.tis_imp_ratio_cap, "actor_rollout_ref.actor.tis_imp_ratio_cap"
    require(_number(cap) and (cap <= 0 or cap >= 1), key, f"{key}={cap!r} must be -1 (off) or a cap >= 1, e.g. 2")
    require(cap <= 0 or behaviour, key, f"{key} needs the rollout's log-probs: {fix}")
    key = "actor_rollout_ref.actor.policy_loss.behav_imp_weight_cap"
    cap = actor.policy_loss.behav_imp_weight_cap
    require(
        cap is None or (_number(cap) and cap > 1),
        key,
        f"{key}={cap!r} must be a number > 1 (AReaL masks tokens whose pi_prox/pi_behav exceeds it), e.g. 5, "
        f"or null for no cap",
    )
    if actor.policy_loss.off_policy == "decoupled":
        key = "actor_rollout_ref.actor.policy_loss.off_policy"
        require(
            behaviour,
            key,
            f"{key}=decoupled weights tokens by pi_prox/pi_behav and needs the rollout's log-probs: {fix}",
        )
        require(
            actor.tis_imp_ratio_cap <= 0,
            "actor_rollout_ref.actor.tis_imp_ratio_cap",
            f"actor_rollout_ref.actor.tis_imp_ratio_cap with {key}=decoupled would weight each token by "
            f"pi_old/pi_rollout twice: set actor_rollout_ref.actor.tis_imp_ratio_cap=-1 (behav_imp_weight_cap "
            f"bounds decoupled's weight)",
        )
    for side, bound, valid in (
        ("low", actor.mis_ratio_low, "a number in (0, 1)"),
        ("high", actor.mis_ratio_high, "a number > 1"),
    ):
        key = f"actor_rollout_ref.actor.mis_ratio_{side}"
        ok = _number(bound) and (0 < bound < 1 if side == "low" else bound > 1)
        require(
            bound is None or ok,
            key,
            f"{key}={bound!r} must be null (no bound) or {valid}: the band of kept "
            f"sequence ratios must hold 1, an on-policy sequence's ratio",
        )
        require(
            bound is None or behaviour,
            key,
            f"{key} masks sequences by pi_old/pi_rollout and needs the rollout's log-probs: {fix}",
        )
