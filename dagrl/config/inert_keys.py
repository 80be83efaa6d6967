"""Pre-flight of settings another key switches off: a key set away from its default while the key that makes the
code read it is off (kl_loss_coef without use_kl_loss, min_lr under a constant schedule, critic.* on a graph
without a critic). Such a run trains as if the key were not there, while the user believes it applies; the error
names both keys and the two ways out.

One table, INERT, says for each key (or fnmatch pattern) when the code reads it; the values come from a snapshot of
the config (reading them here must not count as the code using them: tests prove every key in conf/ is read by a
run). A key counts as set when it differs from conf/'s default and does not just follow another key's value through
an interpolation (critic.shuffle follows actor_rollout_ref.actor.shuffle)."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Callable

from dagrl.algo.catalog import ADV_ESTIMATORS, LOSS_AGGREGATIONS, POLICY_LOSSES
from dagrl.algo.registry import Registry
from dagrl.config.errors import ConfigError
from dagrl.config.tree import Cfg, leaves

A, R, D = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "distillation.distillation_loss"


@dataclass(frozen=True)
class Inert:
    keys: str  # a key, or an fnmatch pattern over keys
    read: Callable[[dict[str, Any]], bool]  # the code reads the key(s) in this config (False only when sure)
    because: str | Callable[[dict[str, Any]], str]  # why not here, naming the switch (and its value)
    fix: str  # how to make it apply


def _off(value: Any) -> bool:
    return value is False


def _schedule(prefix: str) -> Callable[[dict[str, Any]], bool]:
    """A floor (min_lr, min_lr_ratio) is read by a decaying schedule: warmup_style replaces lr_decay_style."""
    return lambda c: (c.get(f"{prefix}.warmup_style") or c.get(f"{prefix}.lr_decay_style")) != "constant"


def _floor_set(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


INERT = (
    Inert(
        f"{A}.kl_loss_coef",
        lambda c: not _off(c.get(f"{A}.use_kl_loss")),
        f"{A}.use_kl_loss=false (no KL term in the loss)",
        f"set {A}.use_kl_loss=true",
    ),
    Inert(
        f"{A}.kl_loss_type",
        lambda c: not _off(c.get(f"{A}.use_kl_loss")),
        f"{A}.use_kl_loss=false (no KL term in the loss)",
        f"set {A}.use_kl_loss=true",
    ),
    Inert(
        "algorithm.kl_ctrl.*",
        lambda c: not _off(c.get("algorithm.use_kl_in_reward")),
        "algorithm.use_kl_in_reward=false (no KL penalty in the reward)",
        "set algorithm.use_kl_in_reward=true",
    ),
    Inert(
        "algorithm.kl_penalty",
        lambda c: not _off(c.get("algorithm.use_kl_in_reward")),
        "algorithm.use_kl_in_reward=false (no KL penalty in the reward)",
        "set algorithm.use_kl_in_reward=true",
    ),
    Inert(
        f"{R}.val_kwargs.temperature",
        lambda c: not _off(c.get(f"{R}.val_kwargs.do_sample")),
        f"{R}.val_kwargs.do_sample=false (greedy validation)",
        f"set {R}.val_kwargs.do_sample=true",
    ),
    Inert(
        f"{R}.val_kwargs.top_[pk]",
        lambda c: not _off(c.get(f"{R}.val_kwargs.do_sample")),
        f"{R}.val_kwargs.do_sample=false (greedy validation)",
        f"set {R}.val_kwargs.do_sample=true",
    ),
    Inert(
        f"{R}.top_[pk]",
        lambda c: not _off(c.get(f"{R}.do_sample")),
        f"{R}.do_sample=false (greedy rollouts)",
        f"set {R}.do_sample=true",
    ),
    *(  # the vLLM engine's own settings (engine/rollout/vllm.py): transformers' generate has no counterpart
        Inert(
            f"{R}.{name}",
            lambda c: c.get(f"{R}.name") != "hf",
            f"{R}.name=hf (transformers' generate, which has no such setting; vLLM reads it)",
            f"set {R}.name=vllm",
        )
        for name in (
            "gpu_memory_utilization",
            "max_num_batched_tokens",
            "max_num_seqs",
            "enforce_eager",
            "free_cache_engine",
            "enable_chunked_prefill",
            "enable_prefix_caching",
            "load_format",
            "cache_dir",
            "kv_cache_dtype",
        )
    ),
    Inert(
        f"{R}.fp8_scales",
        lambda c: c.get(f"{R}.quantization") is not None,
        f"{R}.quantization=null (the rollout's weights stay bf16)",
        f"set {R}.quantization=fp8",
    ),
    Inert(
        f"{D}.distillation_loss_coef",
        lambda c: not _off(c.get("distillation.enabled")) and not _off(c.get(f"{D}.use_task_rewards")),
        lambda c: (
            "distillation.enabled=false (no teacher)"
            if _off(c.get("distillation.enabled"))
            else f"{D}.use_task_rewards=false (the distillation term alone, weight 1)"
        ),
        f"run dag=opd with {D}.use_task_rewards=true",
    ),
    Inert(
        "distillation.*",
        lambda c: not _off(c.get("distillation.enabled")),
        "distillation.enabled=false (no teacher)",
        "run dag=opd",
    ),
)
# a LoRA section's keys are read only at a rank above 0 (the actor's and the critic's alike)
INERT += tuple(
    Inert(
        f"{lora}.*",
        lambda c, lora=lora: c.get(f"{lora}.rank") != 0,
        f"{lora}.rank=0 (no LoRA: every parameter trains)",
        f"set {lora}.rank, e.g. 32",
    )
    for lora in ("actor_rollout_ref.model.lora", "critic.model.lora")
)
# what validation does is read only when there is a validation set (null and [] alike: no validation)
INERT += tuple(
    Inert(
        f"trainer.{key}",
        lambda c: bool(c.get("data.val_files")),
        "data.val_files is empty (no validation set)",
        "set data.val_files to a parquet file",
    )
    for key in ("test_freq", "log_val_generations", "validation_data_dir")
)
for _prefix in (f"{A}.optim", "critic.optim"):
    INERT += (
        Inert(
            f"{_prefix}.min_lr",
            _schedule(_prefix),
            f"{_prefix}.lr_decay_style=constant (the LR never decays to a floor)",
            f"set {_prefix}.lr_decay_style=cosine or linear",
        ),
        Inert(
            f"{_prefix}.min_lr_ratio",
            _schedule(_prefix),
            f"{_prefix}.lr_decay_style=constant (the LR never decays to a floor)",
            f"set {_prefix}.lr_decay_style=cosine or linear",
        ),
        Inert(
            f"{_prefix}.lr_warmup_steps_ratio",
            lambda c, p=_prefix: (
                not (isinstance(c.get(f"{p}.lr_warmup_steps"), int) and c.get(f"{p}.lr_warmup_steps") >= 0)
            ),
            f"{_prefix}.lr_warmup_steps is set (>= 0: it replaces the ratio)",
            f"set {_prefix}.lr_warmup_steps=-1 to use the ratio",
        ),
    )
VERBS = {
    "algorithm.gamma": "does not discount",
    "algorithm.lam": "has no lambda",
    "algorithm.norm_adv_by_std_in_grpo": "does not normalise by the group's std",
    f"{A}.loss_scale_factor": "does not divide token sums by it",
}


def _named(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def option_rules(registry: Registry) -> tuple[Inert, ...]:
    """Each key an entry of `registry` declares in `uses` is read only when the registry's key names such an
    entry; needs=("values",) adds the PPO graph to the fix."""
    switch, rules = registry.keys[0], []
    for use in dict.fromkeys(use for entry in registry for use in entry.uses):
        readers = [entry for entry in registry if use in entry.uses]
        names = {name for entry in readers for name in (entry.name, *entry.aliases)}
        fixes = [entry.name + (" with dag=ppo" if "values" in entry.needs else "") for entry in readers]
        key = f"{registry.section}.{use}"
        verb = VERBS.get(key, f"does not read {use}")
        rules.append(
            Inert(
                key,
                lambda c, s=switch, n=names: c.get(s) in n,
                lambda c, s=switch, v=verb, r=readers: (
                    f"{s}={c.get(s)} {v} ({_named([e.name for e in r])} {'does' if len(r) == 1 else 'do'})"
                ),
                f"set {switch}={fixes[0]}" + (f" (or {', '.join(fixes[1:])})" if fixes[1:] else ""),
            )
        )
    return tuple(rules)


def _fixed_aggregation(config: dict[str, Any]) -> str | None:
    loss = POLICY_LOSSES.get(config.get(f"{A}.policy_loss.loss_mode"))
    return loss.aggregation if loss else None


FIXED_AGGREGATION = Inert(
    f"{A}.loss_agg_mode",
    lambda c: _fixed_aggregation(c) in (None, c.get(f"{A}.loss_agg_mode")),
    lambda c: (
        f"{A}.policy_loss.loss_mode={c.get(f'{A}.policy_loss.loss_mode')} aggregates "
        f"with {_fixed_aggregation(c)}, as in verl"
    ),
    f"set {A}.policy_loss.loss_mode to a loss without its own aggregation (e.g. vanilla)",
)


def rules() -> tuple[Inert, ...]:
    """INERT and the rules of what the catalog's entries read, as registered now."""
    catalog = (rule for kind in (ADV_ESTIMATORS, POLICY_LOSSES, LOSS_AGGREGATIONS) for rule in option_rules(kind))
    return (*INERT, *catalog, FIXED_AGGREGATION)


FLOORS = {f"{p}.{name}" for p in (f"{A}.optim", "critic.optim") for name in ("min_lr", "min_lr_ratio")}


def _set_keys(config: dict[str, Any]) -> list[str]:
    """Keys of `config` changed from conf/'s defaults by the user (not through an interpolation)."""
    from dagrl.config.schema.root import interpolated_defaults
    from dagrl.config.schema.check import MISSING, default_value

    sources = interpolated_defaults()
    changed = []
    for key, value in config.items():
        default = default_value(key)
        if default is MISSING or repr(value) == repr(default):
            continue
        source = sources.get(key)
        if source is not None and repr(config.get(source)) == repr(value):
            continue  # it takes another key's value: that key is the one set
        if key in FLOORS and not _floor_set(value):
            continue  # 0 / null is no floor: harmless under any schedule
        if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0):
            continue  # zeroed with its switch off, as verl's DAPO scripts write kl_coef=0.0: off twice, not a mistake
        changed.append(key)
    return changed


def check_inert_keys(cfg: Cfg, reported: set[str] | frozenset = frozenset()) -> None:
    """The first key set while the key that makes it apply is off (one line: both keys, and the fix). `reported`:
    keys pre-flight has already named (a bad critic value on a graph without a critic is that value's line alone)."""
    from dagrl.config.schema.check import show
    from dagrl.config.preflight.graph import graph_roles

    config = leaves(cfg.snapshot())
    changed = _set_keys(config)
    for key in changed:
        rule = next((r for r in rules() if fnmatchcase(key, r.keys)), None)
        if rule is not None and key not in reported and not rule.read(config):
            because = rule.because(config) if callable(rule.because) else rule.because
            raise ConfigError(key, f"{key}={show(config[key])} has no effect: {because}; {rule.fix}, or drop {key}")
    critic = [key for key in changed if key.startswith("critic.")]
    if not critic or any(key.startswith("critic.") for key in reported):
        return
    try:
        roles = graph_roles(Cfg(cfg.snapshot()))
    except Exception:  # noqa: BLE001 - a pipeline function that fails is dag.graph.preflight_graph's to name
        return
    if "critic" not in roles:
        key, estimator = critic[0], next(e.name for e in ADV_ESTIMATORS if "values" in e.needs)
        raise ConfigError(
            key,
            f"{key}={show(config[key])} has no effect: the graph has no critic node (critic.* is "
            f"read by the critic nodes of dag=ppo); for PPO with a critic set dag=ppo "
            f"algorithm.adv_estimator={estimator}, or drop {key}",
        )
