"""The typed schema of every key in conf/, checked once at the start of pre-flight.

Types come from the default config itself (conf/<group>/default.yaml and the default graph, interpolations
resolved, so `${...}` keys are typed by what they resolve to): a bool default makes a true/false key, an int an
integer key, a float a number key (an integer is accepted too), a str a string key, a list a list, a map a map.
TYPES says what a default cannot: keys whose default is null, keys taking a path or a list of paths, the free-form
maps. RANGES gives every numeric key (and a few lists) its allowed values; tests/config/test_schema.py proves that
every leaf key has a type and every numeric key a range. A failure is one line: the key, the value, the expectation:
`data.shuffle='no' must be true or false`, `actor_rollout_ref.rollout.top_p=5 must be a number in (0, 1]`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Callable

from omegaconf import OmegaConf

from dagrl.config.algorithm_checks import choice_error
from dagrl.config.conf_dir import CONF_DIR, FREEFORM_MAPS, followers, interpolated_defaults
from dagrl.config.errors import ConfigError
from dagrl.config.sections import CHOICES
from dagrl.config.tree import Cfg, leaves

MISSING = object()

# characters a value copied from a web page or a word processor brings along: Hydra's grammar refuses them
LOOKALIKES = {"\u2212": "-", "\u2013": "-", "\u2014": "-", "\u2010": "-", "\u2011": "-", "\u201c": '"',
              "\u201d": '"', "\u201e": '"', "\u2018": "'", "\u2019": "'", "\u00a0": " ", "\u2009": " ",
              "\u202f": " ", "\u00d7": "x"}


@dataclass(frozen=True)
class Range:
    ok: Callable[[Any], bool]
    text: str            # appended to the type's noun ("an integer" + " >= 0"); a leading "=" replaces the noun
    hint: str = ""       # why, or what the special values mean: appended in parentheses


def hinted(bound: Range, hint: str) -> Range:
    return Range(bound.ok, bound.text, hint)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


POSITIVE_INT = Range(lambda v: v >= 1, ">= 1")
NON_NEGATIVE_INT = Range(lambda v: v >= 0, ">= 0")
ANY_INT = Range(lambda v: True, "")
NON_NEGATIVE = Range(lambda v: _finite(v) and v >= 0, ">= 0")
POSITIVE = Range(lambda v: _finite(v) and v > 0, "> 0")
ABOVE_ONE = Range(lambda v: _finite(v) and v > 1, "> 1")
UNIT = Range(lambda v: _finite(v) and 0 <= v <= 1, "in [0, 1]")
OPEN_UNIT = Range(lambda v: _finite(v) and 0 < v < 1, "in (0, 1)")
TOP_P = Range(lambda v: _finite(v) and 0 < v <= 1, "in (0, 1]")
TOP_K = Range(lambda v: v == -1 or v >= 1, "=-1 (off) or an integer >= 1")
EVERY_N = Range(lambda v: v == -1 or v >= 1, "=-1 or an integer >= 1")  # every N steps; -1 = never
TIS_CAP = Range(lambda v: _finite(v) and (v <= 0 or v >= 1), "=-1 (off) or a cap >= 1")


def _ints_from(low: int) -> Callable[[Any], bool]:
    """A non-empty list of integers >= low."""
    return lambda v: len(v) > 0 and all(isinstance(i, int) and not isinstance(i, bool) and i >= low for i in v)


BETAS = Range(lambda v: len(v) == 2 and all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1
                                            for b in v), "=two numbers in [0, 1)")

# What a default cannot tell: T? = null allowed; "paths" = a string or a list of strings. Path-valued keys say what
# the path names (dagrl/config/path_values.py checks every such key by its kind): "file" an existing file, "files"
# one or a list of them, "dir" an existing directory, "model" a local HF model directory, "outdir" a directory the
# run writes (created when missing).
TYPES: dict[str, str] = {
    "data.train_files": "files?", "data.val_files": "files?", "data.cache_dir": "outdir?",
    "actor_rollout_ref.model.path": "model?", "actor_rollout_ref.model.trainable_top_layers": "int?",
    "actor_rollout_ref.actor.clip_ratio_low": "float?", "actor_rollout_ref.actor.clip_ratio_high": "float?",
    "actor_rollout_ref.actor.loss_scale_factor": "float?", "actor_rollout_ref.actor.tis_imp_ratio_cap": "float",
    "actor_rollout_ref.actor.mis_ratio_low": "float?", "actor_rollout_ref.actor.mis_ratio_high": "float?",
    "actor_rollout_ref.actor.policy_loss.behav_imp_weight_cap": "float?",
    "actor_rollout_ref.actor.optim.clip_grad": "float?", "critic.optim.clip_grad": "float?",
    "actor_rollout_ref.actor.grad_clip": "float?", "critic.grad_clip": "float?",
    "actor_rollout_ref.actor.checkpoint.save_contents": "paths",
    "actor_rollout_ref.actor.checkpoint.load_contents": "paths",
    "actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size": "int?",
    "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size": "int?",
    "actor_rollout_ref.actor.megatron.dist_checkpointing_path": "dir?",
    "actor_rollout_ref.rollout.prompt_length": "int?", "actor_rollout_ref.rollout.response_length": "int?",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "int?", "actor_rollout_ref.rollout.max_model_len": "int?",
    "actor_rollout_ref.rollout.cache_dir": "outdir?",
    "actor_rollout_ref.rollout.multi_turn.tool_timeout_s": "float",
    "actor_rollout_ref.rollout.multi_turn.tool_config_path": "file?",
    "actor_rollout_ref.rollout.multi_turn.interaction_config_path": "file?",
    "critic.model.path": "model?", "custom_reward_function.path": "file?",
    "trainer.logger": "paths", "trainer.tensorboard_dir": "outdir?", "trainer.ray_address": "str?",
    "trainer.total_training_steps": "int?", "trainer.resume_from_path": "dir?", "trainer.default_local_dir": "outdir",
    "trainer.max_actor_ckpt_to_keep": "int?",
    "trainer.validation_data_dir": "outdir?", "trainer.rollout_data_dir": "outdir?", "dag.custom_pipeline_fn": "str?",
    "actor_rollout_ref.actor.optim.warmup_style": "str?", "critic.optim.warmup_style": "str?",
    "actor_rollout_ref.actor.optim.min_lr_ratio": "float?", "critic.optim.min_lr_ratio": "float?",
    "algorithm.kl_ctrl.horizon": "int", "trainer.hang_timeout_s": "float", "trainer.hang_startup_timeout_s": "float",
    "trainer.preemption_grace_s": "float", "actor_rollout_ref.nccl_timeout": "float",
    "global_profiler.tool": "str?", "global_profiler.steps": "list?", "global_profiler.save_path": "outdir",
    "distillation.teacher_model.model_path": "model?", "distillation.distillation_loss.loss_max_clamp": "float?",
    "distillation.distillation_loss.log_prob_min_clamp": "float?",
}

MIS_BAND = "null for no bound; the band of kept sequence ratios must hold 1, an on-policy sequence's ratio"

# key or fnmatch pattern -> range; the first match wins (exact keys are looked up first)
RANGES: dict[str, Range] = {
    "actor_rollout_ref.rollout.temperature": hinted(POSITIVE, "log-probs are divided by it; for greedy validation "
                                                    "set actor_rollout_ref.rollout.val_kwargs.do_sample=false"),
    "actor_rollout_ref.rollout.val_kwargs.temperature": NON_NEGATIVE,  # greedy = 0
    "*.top_p": TOP_P, "*.top_k": TOP_K,
    "*.clip_ratio": NON_NEGATIVE, "*.clip_ratio_low": NON_NEGATIVE, "*.clip_ratio_high": NON_NEGATIVE,
    "*.clip_ratio_c": hinted(ABOVE_ONE, "dual clip"), "critic.cliprange_value": POSITIVE,
    "*.loss_scale_factor": POSITIVE, "*.entropy_coeff": NON_NEGATIVE, "*.kl_loss_coef": NON_NEGATIVE,
    "*.tis_imp_ratio_cap": TIS_CAP,
    "*.mis_ratio_low": hinted(OPEN_UNIT, MIS_BAND), "*.mis_ratio_high": hinted(ABOVE_ONE, MIS_BAND),
    "*.behav_imp_weight_cap": hinted(ABOVE_ONE, "AReaL masks tokens whose pi_prox/pi_behav exceeds it, e.g. 5; "
                                                "null for no cap"),
    "*.grad_clip": POSITIVE, "*.clip_grad": POSITIVE,
    "*.clip_cov_ratio": OPEN_UNIT, "*.kl_cov_ratio": OPEN_UNIT, "*.ppo_kl_coef": NON_NEGATIVE,
    "*.clip_cov_lb": Range(_finite, "=a number"), "*.clip_cov_ub": Range(_finite, "=a number"),
    "*.tau_pos": POSITIVE, "*.tau_neg": POSITIVE,
    "*.optim.lr": Range(lambda v: _finite(v) and 0 < v <= 1, "> 0 and <= 1",
                        "a peak learning rate, e.g. 1e-6; at 0 nothing would train"),
    "*.optim.min_lr": NON_NEGATIVE, "*.optim.weight_decay": NON_NEGATIVE,
    "*.optim.betas": BETAS, "*.optim.lr_warmup_steps": ANY_INT,  # < 0: use lr_warmup_steps_ratio
    "*.optim.lr_warmup_steps_ratio": UNIT, "*.optim.min_lr_ratio": hinted(UNIT, "min_lr = min_lr_ratio x lr"),
    "*.seed": NON_NEGATIVE_INT, "*_size": POSITIVE_INT, "*_size_per_gpu": POSITIVE_INT,
    "*_len_per_gpu": POSITIVE_INT, "*.ppo_epochs": POSITIVE_INT,
    "data.max_prompt_length": POSITIVE_INT, "data.max_response_length": POSITIVE_INT,
    "actor_rollout_ref.model.trainable_top_layers": POSITIVE_INT,
    "actor_rollout_ref.rollout.n": POSITIVE_INT, "actor_rollout_ref.rollout.val_kwargs.n": POSITIVE_INT,
    "actor_rollout_ref.rollout.prompt_length": POSITIVE_INT, "actor_rollout_ref.rollout.response_length": POSITIVE_INT,
    "actor_rollout_ref.rollout.gpu_memory_utilization": OPEN_UNIT,
    "actor_rollout_ref.rollout.max_model_len": POSITIVE_INT, "actor_rollout_ref.rollout.max_num_batched_tokens":
        POSITIVE_INT, "actor_rollout_ref.rollout.max_num_seqs": POSITIVE_INT,
    "actor_rollout_ref.rollout.update_weights_bucket_megabytes": POSITIVE_INT,
    "actor_rollout_ref.rollout.multi_turn.max_*": POSITIVE_INT, "*.tool_timeout_s": POSITIVE,
    "actor_rollout_ref.rollout.multi_turn.tool_overlap_steps": NON_NEGATIVE_INT,
    "reward_model.timeout_s": POSITIVE, "reward_model.overlong_buffer.len": NON_NEGATIVE_INT,
    "reward_model.overlong_buffer.penalty_factor": NON_NEGATIVE,
    "distillation.distillation_loss.distillation_loss_coef": POSITIVE,
    "distillation.distillation_loss.loss_max_clamp": hinted(POSITIVE, "null for no cap"),
    "distillation.distillation_loss.log_prob_min_clamp": Range(lambda v: _finite(v) and v < 0, "< 0",
                                                               "a log-prob floor, e.g. -10; null for none"),
    "algorithm.gamma": UNIT, "algorithm.lam": UNIT, "algorithm.kl_ctrl.kl_coef": NON_NEGATIVE,
    "algorithm.kl_ctrl.target_kl": NON_NEGATIVE, "algorithm.kl_ctrl.horizon": POSITIVE_INT,
    "algorithm.filter_groups.max_num_gen_batches": hinted(NON_NEGATIVE_INT, "0 = no limit"),
    "async_training.oversample_ratio": Range(lambda v: _finite(v) and v >= 1, ">= 1"),
    "async_training.max_staleness": NON_NEGATIVE_INT, "async_training.trigger_parameter_sync_step": POSITIVE_INT,
    "trainer.nnodes": POSITIVE_INT, "trainer.n_gpus_per_node": POSITIVE_INT,
    "rollout.nnodes": POSITIVE_INT, "trainer.hang_timeout_s": NON_NEGATIVE,
    "trainer.hang_startup_timeout_s": POSITIVE, "trainer.preemption_grace_s": NON_NEGATIVE,
    "trainer.max_restarts": NON_NEGATIVE_INT, "actor_rollout_ref.nccl_timeout": POSITIVE,
    "rollout.n_gpus_per_node": POSITIVE_INT, "trainer.total_epochs": POSITIVE_INT,
    "trainer.total_training_steps": hinted(POSITIVE_INT, "null: trainer.total_epochs decides"),
    "trainer.critic_warmup": NON_NEGATIVE_INT,
    "trainer.test_freq": hinted(EVERY_N, "-1 = never"), "trainer.save_freq": hinted(EVERY_N, "-1 = never"),
    "trainer.max_actor_ckpt_to_keep": ANY_INT,  # null or <= 0: keep all
    "trainer.max_consecutive_skips": hinted(NON_NEGATIVE_INT, "0 = never stop"),
    "trainer.log_val_generations": hinted(NON_NEGATIVE_INT, "0 = off"),
    "global_profiler.steps": Range(_ints_from(1), "=a non-empty list of positive integers (global steps), e.g. [2,3]"),
    "global_profiler.ranks": Range(_ints_from(0), "=a non-empty list of integers >= 0 (global ranks), e.g. [0]"),
}

NOUNS = {"bool": "true or false", "int": "an integer", "float": "a number", "str": "a string",
         "paths": "a string or a list of strings", "list": "a list", "dict": "a map (key: value)",
         "file": "a file path", "files": "a file path or a list of them", "dir": "a directory path",
         "model": "a model directory path", "outdir": "a directory path"}
PATH_KINDS = ("file", "files", "dir", "model", "outdir")  # strings (files: or lists of strings) naming a path


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    for kind, types in (("int", int), ("float", float), ("str", str), ("list", list), ("dict", dict)):
        if isinstance(value, types):
            return kind
    return "str?"  # null


@functools.lru_cache(maxsize=1)
def default_config() -> dict[str, Any]:
    """conf/ with every group at its default option, resolved (as compose() without overrides, minus Hydra)."""
    defaults = [entry for entry in OmegaConf.load(CONF_DIR / "dagrl.yaml").defaults if not isinstance(entry, str)]
    options = {group: option for entry in defaults for group, option in entry.items() if " " not in group}
    tree = {group: OmegaConf.load(CONF_DIR / group / f"{option}.yaml") for group, option in options.items()}
    return OmegaConf.to_container(OmegaConf.create(tree), resolve=True)


@functools.lru_cache(maxsize=1)
def schema() -> dict[str, str]:
    """{dotted key: type} of every leaf of the default config ("T?" = T or null); free-form maps are "dict"."""

    found = {key: TYPES.get(key, _kind(value)) for key, value in leaves(default_config()).items()}
    found.update({key: "dict" for key in FREEFORM_MAPS})
    return found


def range_of(key: str) -> Range | None:
    if key in RANGES:
        return RANGES[key]
    return next((r for pattern, r in RANGES.items() if "*" in pattern and fnmatchcase(key, pattern)), None)


def expected(kind: str, bound: Range | None) -> str:
    nullable, kind = kind.endswith("?"), kind.rstrip("?")
    noun = NOUNS[kind]
    if bound is not None and bound.text:
        if bound.text.startswith("="):
            noun = bound.text[1:]
        elif kind == "int" and bound.text == ">= 1":
            noun = "a positive integer"
        else:
            noun = f"{noun} {bound.text}"
    return f"null or {noun}" if nullable else noun


def type_ok(kind: str, value: Any) -> bool:
    if value is None:
        return kind.endswith("?")
    kind = kind.rstrip("?")
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "float":
        return isinstance(value, (int, float))
    if kind in ("paths", "files"):
        return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    if kind in PATH_KINDS:
        return isinstance(value, str)
    return isinstance(value, {"int": int, "str": str, "list": list, "dict": dict}[kind])


def _lookup(tree: dict[str, Any], key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def show(value: Any) -> str:
    """A value as it is written on the command line: null, true/false, 'text', 0.5."""
    if value is None:
        return "null"
    return ("true" if value else "false") if isinstance(value, bool) else repr(value)


def check_value(key: str, kind: str, value: Any, config: dict[str, Any] | None = None) -> None:
    """Raise ConfigError unless `value` has the key's type and lies in its range (null passes a nullable key)."""
    if key in CHOICES and value is not None:
        allowed = CHOICES[key]
        if isinstance(value, bool) or value not in allowed:
            raise ConfigError(key, choice_error(key, show(value), allowed))
    bound = range_of(key) if kind.rstrip("?") in ("int", "float", "list") else None
    if not type_ok(kind, value):
        ratio = f"{key}_ratio"  # lr_warmup_steps=0.1: a fraction meant for lr_warmup_steps_ratio
        hint = f" (a fraction of all steps is {ratio})" if kind.rstrip("?") == "int" and isinstance(value, float) \
            and 0 < value < 1 and ratio in schema() else ""
        if not hint and value is None and bound is not None and bound.hint:
            hint = f" ({bound.hint})"  # null where a number goes: say what the special values are instead
        text = _number_as_text(key, kind, value)
        if text:  # '1e-5' (quoted), '3e-6\' (a pasted line continuation): the number is there, the text is the fault
            raise ConfigError(key, f"{key}={show(value)} must be {expected(kind, bound)}, not text: {text}")
        raise ConfigError(key, f"{key}={show(value)} must be {expected(kind, bound)}{hint}"
                               f"{_followed(key, value, config)}")
    if value is not None and bound is not None and not bound.ok(value):
        # a number of the right type out of range: "must be > 0", "must be in (0, 1]"; integers keep their noun
        text = expected(kind, bound) if kind.startswith("int") else bound.text.removeprefix("=")
        hint = f" ({bound.hint})" if bound.hint else ""
        raise ConfigError(key, f"{key}={show(value)} must be {text}{hint}{_followed(key, value, config)}")


def _number_as_text(key: str, kind: str, value: Any) -> str:
    """The fix for a number that arrived as text (None: not that): quoted on the command line or in a script
    (Hydra keeps '1e-5' a string), or with a line continuation's backslash or a lookalike minus pasted in."""
    if kind.rstrip("?") not in ("int", "float") or not isinstance(value, str):
        return ""
    cleaned = "".join(LOOKALIKES.get(char, char) for char in value).strip().rstrip("\\").strip().strip("'\"")
    try:
        number = float(cleaned)
    except ValueError:
        return ""
    if not math.isfinite(number) or (kind.rstrip("?") == "int" and not number.is_integer()):
        return ""
    if cleaned == value:
        return (f"it was quoted (or came from a YAML file, which reads 1e-5 without a '.' as text): write "
                f"{key}={cleaned} unquoted")
    if value.rstrip().endswith("\\"):
        return (f"it ends with a backslash (a line continuation pasted into the value?): write {key}={cleaned}, "
                f"with a space before any '\\' that continues the command")
    return f"write {key}={cleaned} (plain ASCII digits, no spaces or quotes)"


def _followed(key: str, value: Any, config: dict[str, Any] | None) -> str:
    """Interpolated keys that follow the key named (and have its value): say so (the fix also sets them)."""
    keys = [k for k in followers().get(key, []) if config is None or _lookup(config, k) == value]
    return f" ({', '.join(keys)} take{'s' if len(keys) == 1 else ''} the value from {key})" if keys else ""


def check_schema(config: dict[str, Any], problems=None) -> None:
    """Every key of the schema, in conf/'s order: the first wrong type or out-of-range value raises ConfigError;
    with `problems` (checks.Problems), every such key not reported yet is."""
    for key, kind in schema().items():
        value = _lookup(config, key)
        if value is MISSING:  # a key another group option lacks is not checked
            continue
        if problems is None:
            check_value(key, kind, value, config)
        elif key not in problems.keys and not _fails(interpolated_defaults().get(key), value, config):
            problems.run(check_value, key, kind, value, config)  # (a key that takes a bad value is named with it)


def _fails(key: str | None, value: Any, config: dict[str, Any]) -> bool:
    """`key` holds `value` and that fails its check."""
    if key not in schema() or _lookup(config, key) != value:
        return False
    try:
        check_value(key, schema()[key], value, config)
    except ConfigError:
        return True
    return False


def default_value(key: str) -> Any:
    """`key`'s value in conf/'s defaults (MISSING where the default config has no such key)."""
    return _lookup(default_config(), key)


def check_sampling(config: Any) -> None:
    """Validation that samples at temperature 0 contradicts itself (vLLM and HF both refuse or divide by zero).
    `config` a Cfg (pre-flight: its reads are recorded, so a do_sample that failed its type check is not reread
    here as true) or plain data."""
    val = (Cfg(config) if isinstance(config, dict) else config).actor_rollout_ref.rollout.val_kwargs
    key = "actor_rollout_ref.rollout.val_kwargs.temperature"
    if val.do_sample and val.temperature == 0:
        raise ConfigError(key, f"{key}=0 with actor_rollout_ref.rollout.val_kwargs.do_sample=true: sampling needs a "
                               f"temperature > 0 (e.g. 0.6); for greedy validation set val_kwargs.do_sample=false")
