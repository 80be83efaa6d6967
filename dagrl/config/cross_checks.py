"""Pre-flight rules between keys of different sections that the schema's per-key types and ranges cannot see: a
schedule whose floor is above its peak, a setting that has no effect without another, a profiled step the run never
reaches."""

from __future__ import annotations

from dagrl.config.checks import get
from dagrl.config.errors import require
from dagrl.config.errors import ConfigError
from dagrl.config.derived import total_steps
from dagrl.config.tree import Cfg


def check_lr_floor(cfg: Cfg, prefix: str) -> None:
    """min_lr above the peak lr would make a decaying schedule climb (Megatron's scheduler asserts on it once the
    models are built)."""
    lr, min_lr = get(cfg, f"{prefix}.lr"), get(cfg, f"{prefix}.min_lr")
    if isinstance(lr, (int, float)) and isinstance(min_lr, (int, float)):
        require(
            min_lr <= lr,
            f"{prefix}.min_lr",
            f"{prefix}.min_lr={min_lr} is above {prefix}.lr={lr}: the schedule decays from lr down to min_lr; "
            f"set min_lr <= lr (e.g. {prefix}.min_lr={lr / 10:g})",
        )


def check_overlong_manager(cfg: Cfg) -> None:
    """The overlong-buffer penalty is the dapo reward manager's: with naive it would silently not apply."""
    reward = cfg.reward_model
    require(
        not reward.overlong_buffer.enable or reward.reward_manager == "dapo",
        "reward_model.overlong_buffer.enable",
        f"reward_model.overlong_buffer.enable=true has no effect with reward_model.reward_manager="
        f"{reward.reward_manager} (the penalty is the dapo manager's): set reward_model.reward_manager=dapo, or "
        f"drop overlong_buffer.enable",
    )


def check_async_reward(cfg: Cfg) -> None:
    """Scoring in the background happens behind the reshard node, where dynamic sampling no longer sees the scores."""
    require(
        not (cfg.reward_model.launch_reward_fn_async and cfg.algorithm.filter_groups.enable),
        "reward_model.launch_reward_fn_async",
        "reward_model.launch_reward_fn_async=true scores behind the reshard node, beside the log-prob passes, but "
        "dynamic sampling (algorithm.filter_groups.enable=true) filters on the scores before it: set one of them "
        "false",
    )


def check_profiled_steps(cfg: Cfg, train_rows: int) -> None:
    """Every step global_profiler.steps names is one the run reaches (`derived.total_steps`)."""
    steps = cfg.global_profiler.steps
    if cfg.global_profiler.tool is None or not steps:
        return
    total = total_steps(cfg, train_rows)
    beyond = sorted(step for step in steps if step > total)
    require(
        not beyond,
        "global_profiler.steps",
        f"global_profiler.steps={list(steps)}: step(s) {', '.join(map(str, beyond))} beyond this run's {total} "
        f"step(s) (trainer.total_training_steps / total_epochs) would never be profiled: pick steps in 1..{total}",
    )


def check_critic_warmup(cfg: Cfg, train_rows: int) -> None:
    """trainer.critic_warmup steps train only the critic (nodes/actor.py: steps 1..N): N at or beyond the run's
    last step would end the run with the actor never updated."""
    warmup = cfg.trainer.critic_warmup
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup <= 0:
        return
    total = total_steps(cfg, train_rows)
    require(
        total is None or warmup < total,
        "trainer.critic_warmup",
        f"trainer.critic_warmup={warmup} trains only the critic for the first {warmup} step(s), but this run has "
        f"{total} step(s) (trainer.total_training_steps / total_epochs): the actor would never be updated; set "
        f"trainer.critic_warmup below {total}, or run more steps",
    )


def check_rollout_pool_keys(cfg: Cfg) -> None:
    """rollout.nnodes / rollout.n_gpus_per_node size the rollout pool of separate pools only: set on a colocated
    run they would be ignored while the user expects a pool of that size."""
    if cfg.actor_rollout_ref.hybrid_engine is not True:
        return
    from dagrl.config.schema.check import default_value

    changed = [
        f"rollout.{name}={get(cfg, f'rollout.{name}')}"
        for name in ("nnodes", "n_gpus_per_node")
        if get(cfg, f"rollout.{name}") != default_value(f"rollout.{name}")
    ]
    require(
        not changed,
        "rollout.n_gpus_per_node",
        f"{' and '.join(changed)} size the rollout pool of separate pools, but actor_rollout_ref.hybrid_engine="
        f"true (colocated: every process trains and generates), so it would be ignored: set "
        f"actor_rollout_ref.hybrid_engine=false for separate pools, or drop it",
    )


def check_transformer_overrides(cfg: Cfg) -> None:
    """override_transformer_config keys are fields of megatron.core's TransformerConfig, read from its source (no
    megatron import in pre-flight); the engine would refuse an unknown one only once the models are built."""
    key = "actor_rollout_ref.actor.megatron.override_transformer_config"
    overrides = get(cfg, key)
    overrides = overrides.to_dict() if hasattr(overrides, "to_dict") else overrides
    if not isinstance(overrides, dict) or not overrides:
        return
    from dagrl.config.megatron_fields import transformer_config_fields

    known = transformer_config_fields()
    if known is None:  # megatron-core not found where expected: the engine checks at build time
        return
    unknown = sorted(name for name in overrides if name not in known)
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], sorted(known), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ConfigError(
            f"{key}.{unknown[0]}",
            f"{key}.{unknown[0]} is not a field of megatron.core's TransformerConfig{hint}: drop "
            f"+{key}.{unknown[0]} or fix its name (the fields: megatron/core/transformer/"
            f"transformer_config.py)",
        )


def check_greedy_groups(cfg: Cfg) -> None:
    """Greedy training rollouts give a group n identical responses: a group estimator's advantages are all 0."""
    from dagrl.algo.catalog import ADV_ESTIMATORS

    rollout, estimator = cfg.actor_rollout_ref.rollout, cfg.algorithm.adv_estimator
    group = estimator in ADV_ESTIMATORS and ADV_ESTIMATORS[estimator].group
    require(
        rollout.do_sample is not False or not group or rollout.n == 1,
        "actor_rollout_ref.rollout.do_sample",
        f"actor_rollout_ref.rollout.do_sample=false samples greedily: the {rollout.n} responses of a prompt are "
        f"the same, so algorithm.adv_estimator={estimator} gives every advantage 0 and nothing trains; set "
        f"actor_rollout_ref.rollout.do_sample=true (greedy is for validation: val_kwargs.do_sample=false)",
    )


def check_reward_name_without_path(cfg: Cfg) -> None:
    """A function name without a file would be ignored: the built-in scorers would score the run."""
    custom = cfg.custom_reward_function
    require(
        custom.path is not None or custom.name in (None, "compute_score"),
        "custom_reward_function.name",
        f"custom_reward_function.name={custom.name} has no effect without custom_reward_function.path (the "
        f"built-in scorers would score the run): set custom_reward_function.path to the file defining "
        f"{custom.name}, or drop the name",
    )
