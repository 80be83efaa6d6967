"""Composing conf/ outside `@hydra.main`, and checking command-line overrides early.

Hydra in struct mode already rejects unknown keys, but its message does not say which key was meant, and a
`+key` would be appended silently anywhere. `check_overrides` runs first: an unknown key fails naming the
closest valid one; `+key` is allowed only under the free-form maps users extend. Whatever else Hydra would refuse
(no '=', `~` on a key the code reads, `+` on an existing key, a group option that does not exist, `a,b` read as a
sweep, a `${...}` naming no key) fails in one line naming the override and the fix, not in Hydra's many.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Callable, Sequence

from dagrl.config.conf_dir import CONF_DIR, CONFIG_NAME
from dagrl.config.compose_errors import (
    composition_error,
    env_text_problem,
    graph_shape_problem,
    hydra_dir_problem,
    yaml_error,
)
from dagrl.config.config_keys import closest_key, lookup, section_keys
from dagrl.config.schema.root import freeform_maps
from dagrl.config.errors import ConfigError
from dagrl.config.override_hints import not_an_override, parse_error, stray_word, sweep_fix
from dagrl.placement.layout import PARALLEL_SIZE_NAMES

# verl's keys that dagrl names or shapes differently: an override of one gets the dagrl key in its error line
VERL_KEYS = {
    "async_training.staleness_threshold": "dagrl bounds staleness in whole weight versions: set "
    "async_training.max_staleness=K (an integer >= 0)",
    "async_training.require_batches": "dagrl trains on data.train_batch_size groups a step; groups kept in flight "
    "are async_training.oversample_ratio x that",
    "async_training.partial_rollout_resume": "partial rollouts always resume from the checkpoint's pool "
    "(async_training.partial_rollout=true)",
    "actor_rollout_ref.actor.megatron.dtype": "dagrl's key is actor_rollout_ref.actor.megatron.param_dtype "
    "(float32 | bfloat16; dagrl's default is float32, verl's bfloat16)",
    "actor_rollout_ref.actor.ppo_micro_batch_size": "that global size is deprecated in verl: set "
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.ref.log_prob_micro_batch_size": "set actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size": "set "
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.optim.lr_scheduler_type": "set actor_rollout_ref.actor.optim.lr_decay_style "
    "(constant | linear | cosine)",
    "actor_rollout_ref.rollout.mode": "dagrl's rollout runs inside the training processes; for asynchronous "
    "rollout see async_training.* (docs/async.md); drop the key",
    "actor_rollout_ref.model.use_fused_kernels": "dagrl has no fused-kernel option; drop the key",
    "actor_rollout_ref.actor.use_torch_compile": "dagrl's Megatron engine does not use torch.compile; drop the key",
    "reward_model.enable": "model-based reward models are not supported yet (built-in rule scorers and "
    "custom_reward_function only); drop the key",
    "data.val_batch_size": "validation goes through the whole validation set in chunks sized from "
    "data.train_batch_size x rollout.n; drop the key",
    "trainer.device": "dagrl runs on CUDA when torch sees a GPU, else on CPU; drop the key",
    "trainer.default_hdfs_dir": "dagrl writes checkpoints to trainer.default_local_dir only; drop the key",
    "trainer.max_critic_ckpt_to_keep": "one dagrl checkpoint holds the actor and the critic: "
    "trainer.max_actor_ckpt_to_keep=N keeps N of them",
    "trainer.profile_steps": "dagrl's profiler is the global_profiler section: set global_profiler.tool=torch "
    "global_profiler.steps=[N,...]",
    "actor_rollout_ref.rollout.multi_turn.max_turns": "set actor_rollout_ref.rollout.multi_turn.max_assistant_turns "
    "(and max_user_turns for interaction replies)",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": "dagrl splits sequences with Megatron's context "
    "parallelism: set actor_rollout_ref.actor.megatron.context_parallel_size (with "
    "actor_rollout_ref.model.use_remove_padding=true)",
    "data.return_raw_chat": "dagrl always keeps each prompt's chat messages (multi-turn included); drop the key",
    "async_training.use_rollout_log_probs": "dagrl always recomputes pi_old in the trainer; the rollout's own "
    "log-probs are kept with actor_rollout_ref.rollout.calculate_log_probs=true (for "
    "actor_rollout_ref.actor.policy_loss.off_policy=decoupled or tis_imp_ratio_cap); drop the key",
}
# keys a section lacks on purpose, where the nearest declared one (another section's) would mislead
ABSENT = {
    "critic.model.lora.merge": "the critic has no rollout, so its adapters are never merged or synced "
    "(actor_rollout_ref.model.lora.merge is the actor's): drop the key",
}
# verl's FSDP LoRA keys of the actor's and the critic's model: dagrl takes its Megatron ones (model.lora.*)
for _model in ("actor_rollout_ref.model", "critic.model"):
    VERL_KEYS.update(
        {
            f"{_model}.lora_rank": f"dagrl takes verl's Megatron LoRA keys: set {_model}.lora.rank",
            f"{_model}.lora_alpha": f"dagrl takes verl's Megatron LoRA keys: set {_model}.lora.alpha",
            f"{_model}.target_modules": f"dagrl takes verl's Megatron LoRA keys: set {_model}.lora.target_modules "
            f"(q_proj etc. are accepted there)",
        }
    )
# the reference and the critic reuse the actor's parallel layout and dtype (one set of process groups)
VERL_KEYS.update(
    {
        f"{role}.megatron.{key}": f"the {name} reuses the actor's layout and dtype: set "
        f"actor_rollout_ref.actor.megatron.{'param_dtype' if key == 'dtype' else key} instead"
        for role, name in (("actor_rollout_ref.ref", "reference"), ("critic", "critic"))
        for key in (
            *PARALLEL_SIZE_NAMES,
            "sequence_parallel",
            "use_distributed_optimizer",
            "param_dtype",
            "dtype",
        )
    }
)

from dagrl.config.foreign_keys import (  # noqa: E402 - beside the VERL_KEYS table it extends
    MORE_VERL_KEYS,
    foreign_key_hint,
    other_trainer_hint,
    rollout_correction_hint,
    transformer_config_hint,
)

VERL_KEYS.update(MORE_VERL_KEYS)


def config_groups() -> set[str]:
    return {p.name for p in CONF_DIR.iterdir() if p.is_dir()}


def group_options(group: str, extra_dirs: Sequence[str] = ()) -> list[str]:
    """The options of conf/<group>/, and of <dir>/<group>/ for each --config-dir (which Hydra searches too)."""
    found = {p.stem for root in (CONF_DIR, *map(Path, extra_dirs)) for p in (root / group).glob("*.yaml")}
    return sorted(found)


def _required(key: str, section: bool) -> str:
    what = f"its keys instead ({key}.<key>=...)" if section else f"a value instead ({key}=...)"
    return f"{key} is required and cannot be deleted: set {what}"


def check_overrides(
    overrides: list[str], compose_base: Callable[[list[str]], dict[str, Any]], extra_dirs: Sequence[str] = ()
) -> dict[str, Any]:
    """Raise ConfigError for an override Hydra would refuse (with a multi-line message) or misread; return the
    config the key overrides apply to: `compose_base(group choices)`, composed once the choices are checked.
    `extra_dirs`: the --config-dir directories, whose group options count."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import OverrideParseException

    for before, arg in zip([None, *overrides], overrides):
        elsewhere = not_an_override(arg) if "=" not in arg else None  # whitespace, a comment, a config file
        if elsewhere:
            raise ConfigError(arg.strip() or "overrides", elsewhere)
        if "=" not in arg and not arg.startswith("~") and before and before.endswith("=") and before.count("=") == 1:
            raise ConfigError(
                before,
                f"override '{before}' has no value and '{arg}' follows it (a space after '='?): write {before}{arg}",
            )
        stray = stray_word(before, arg) if "=" not in arg else None
        if stray:
            raise ConfigError(before.split("=", 1)[0].lstrip("+~"), stray)
        if "=" not in arg and not arg.startswith("~"):
            example = f"{arg}=<value>" if re.fullmatch(r"[\w.+]+", arg) else "key=value"
            following = overrides[overrides.index(arg) + 1 : overrides.index(arg) + 2]
            if re.fullmatch(r"[\w.+]+:", arg):  # YAML's `key: value`, split by the shell
                example = f"{arg[:-1]}={following[0] if following else '<value>'} (key=value, not YAML's key: value)"
            raise ConfigError(arg, f"override '{arg}' has no '=': write {example}")
    parser = OverridesParser.create()
    try:
        parsed = parser.parse_overrides(overrides)
    except OverrideParseException as err:
        raise parse_error(parser, overrides, err) from None
    groups = config_groups()
    choices, changes = [], []
    for override in parsed:
        key, text = override.key_or_group, override.input_line
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            problem = hydra_dir_problem(key, text)
            if problem:
                raise problem
            continue
        if key not in groups:
            changes.append(override)
            continue
        options = group_options(key, extra_dirs)
        if override.is_delete():
            raise ConfigError(key, f"override '{text}': {_required(key, True)}")
        given = None if override.is_sweep_override() else override.value()
        if isinstance(given, dict):  # a section written as a map: its keys are overridden one by one
            example = " ".join(f"{key}.{name}={value}" for name, value in list(given.items())[:3]) or f"{key}.<key>=..."
            raise ConfigError(
                key,
                f"override '{text}': {key} is a config group (conf/{key}/), which a map cannot "
                f"replace: set its keys one by one, e.g. {example}",
            )
        if override.type == OverrideType.ADD:
            raise ConfigError(key, f"override '{text}': {key} is already chosen: drop the '+': {text[1:]}")
        value = text.split("=", 1)[1]
        if override.is_sweep_override() or value not in options:
            fix = (
                f"choose one of {', '.join(options)}"
                if len(options) > 1
                else f"it has only {options[0]}.yaml; set its keys instead ({key}.<key>=...)"
            )
            where = " or ".join([f"conf/{key}/", *(f"{d}/{key}/" for d in extra_dirs)])
            raise ConfigError(key, f"override '{text}': {where} has no '{value}': {fix}")
        choices.append(text)
    base = compose_base(choices)
    for override in changes:
        key, text = override.key_or_group, override.input_line
        try:
            exists, default = lookup(base, key)
        except IndexError as err:
            raise ConfigError(key, f"override '{text}': {err}") from None
        if exists and override.type == OverrideType.ADD:
            raise ConfigError(key, f"override '{text}': {key} already exists: drop the '+': {text[1:]}")
        deleting = override.is_delete()
        adding = override.type in (OverrideType.ADD, OverrideType.FORCE_ADD)
        freeform = next((m for m in freeform_maps() if key.startswith(m + ".")), None)
        if override.is_sweep_override() and (exists or freeform):
            raise ConfigError(key, f"override '{text}': {sweep_fix(key, text.split('=', 1)[1], default)}")
        if freeform:
            if not exists and deleting:
                name = key[len(freeform) + 1 :]
                raise ConfigError(key, f"override '{text}': {freeform} has no key '{name}' to delete")
            if not exists and not adding:
                raise ConfigError(key, f"'{key}' adds a key to the free-form map {freeform}: write it as +{key}=...")
            continue
        if exists and deleting:  # every key outside the free-form maps is read by the code
            raise ConfigError(key, f"override '{text}': {_required(key, isinstance(default, dict))}")
        if exists:
            continue
        if key in ABSENT:
            raise ConfigError(key, f"'{key}' is no config key: {ABSENT[key]}")
        value = text.split("=", 1)[1] if "=" in text else "<value>"
        verl = rollout_correction_hint(key, value) or foreign_key_hint(key, VERL_KEYS)
        if verl:
            raise ConfigError(key, f"'{key}' is verl's; {verl}")
        field = transformer_config_hint(key, value)
        if field:
            raise ConfigError(key, field)
        hint = closest_key(key, base)
        other = None if hint else other_trainer_hint(key, value, base)
        if other:  # dagrl's own near miss first (actor.optim.lr is actor_rollout_ref.actor.optim.lr, not TRL's lr)
            raise ConfigError(key, other)
        plus = " ('+' adds keys only under: " + ", ".join(freeform_maps()) + ")" if adding else ""
        fix = f"; did you mean '{hint}'?" if hint else section_keys(key, base)
        raise ConfigError(key, f"unknown config key '{key}'{fix}{plus}")
    return base


def compose(overrides: list[str] | None = None, config_dirs: Sequence[str] = ()) -> dict[str, Any]:
    """The resolved config as plain data, exactly as `python3 -m dagrl.main_dag <overrides>` would see it; a bad
    override raises ConfigError (one line) instead of Hydra's error. `config_dirs`: directories of further group
    options (main_dag's --config-dir; e.g. DIR/dag/my_graph.yaml, chosen with dag=my_graph)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    import yaml
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    overrides = list(overrides or [])
    dirs = [os.path.abspath(os.path.expanduser(d)) for d in config_dirs]
    search = [f"hydra.searchpath=[{','.join(f'file://{d}' for d in dirs)}]"] if dirs else []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        from dagrl.config.preflight.trainer import check_fixed_run_dir

        check_fixed_run_dir(overrides)  # before composing turns ${now:} into a plain time
        try:
            base = check_overrides(
                overrides,
                lambda choices: OmegaConf.to_container(
                    hydra_compose(CONFIG_NAME, overrides=[*search, *choices]), resolve=False
                ),
                dirs,
            )
            config = to_plain(hydra_compose(CONFIG_NAME, overrides=[*search, *overrides]))
        except yaml.YAMLError as err:  # a --config-dir graph (or an edited conf/ file) that does not parse
            raise yaml_error(err) from None
        except (HydraException, OmegaConfBaseException) as err:
            raise composition_error(err, overrides, base) from None
    problem = env_text_problem(overrides, config) or graph_shape_problem(config, overrides, dirs)
    if problem:
        raise problem
    return config


def to_plain(cfg: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(cfg, resolve=True)
    data.pop("hydra", None)
    return data
