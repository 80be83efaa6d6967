"""Pre-flight of asynchronous training (async_training.*). The pools' sizes are checked with the world size
(config/preflight/layout.py), the off-policy correction of stale samples with the actor (config/preflight/actor.py)."""

from __future__ import annotations

import math

from dagrl.config.errors import require
from dagrl.config.tree import Cfg


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
    # a colocated run without partial rollout samples every step with the newest weights: K = 0 (or the default)
    # states that, a larger K asks for asynchrony the run does not have
    colocated = cfg.actor_rollout_ref.hybrid_engine
    require(
        options.partial_rollout or not colocated or staleness <= 1,
        "async_training.max_staleness",
        f"async_training.max_staleness={staleness} has no effect on a colocated run without partial rollout "
        f"(actor_rollout_ref.hybrid_engine=true: every step samples with the newest weights): set "
        f"async_training.partial_rollout=true or actor_rollout_ref.hybrid_engine=false, or drop max_staleness",
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


def check_oversample(cfg: Cfg, train_rows: int) -> None:
    """Partial rollout keeps oversample_ratio x data.train_batch_size groups in flight, each a prompt the sampler
    draws: more than the data holds draws prompts of later epochs (and again and again) into one step."""
    options, batch = cfg.async_training, cfg.data.train_batch_size
    if not options.partial_rollout or not isinstance(train_rows, int):
        return
    groups = math.ceil(options.oversample_ratio * batch)
    require(
        groups <= train_rows,
        "async_training.oversample_ratio",
        f"async_training.oversample_ratio={options.oversample_ratio} keeps {groups} groups in flight "
        f"({options.oversample_ratio} x data.train_batch_size={batch}), more than the {train_rows} training prompts: "
        f"set it at most {train_rows / batch:g} (the rows over data.train_batch_size)",
    )
