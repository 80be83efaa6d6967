"""Small checks shared by the pre-flight rules, and reading the model directory.

Every failure is a ConfigError: one line naming the key (or file) and the fix.
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
from pathlib import Path

from dagrl.config.errors import ConfigError
from dagrl.config.tree import Cfg

logger = logging.getLogger(__name__)

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral", "qwen3_moe")


def get(cfg: Cfg, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = node[part]
    return node


FLOAT32_MAX = 3.4028234663852886e38


def check_finite_numbers(cfg: Cfg, problems: "Problems | None" = None) -> None:
    """No NaN, inf or float32 overflow anywhere in the config (lr=inf trains NaN weights, lr=1e39 cannot reach the
    fp32 optimizer, a nan coefficient poisons every loss). With `problems`, every such key is reported."""
    from dagrl.config.tree import leaves

    config = leaves(cfg.snapshot())
    for key, value in config.items():
        values = value if isinstance(value, list) else [value]
        finite = not any(isinstance(v, float) and not abs(v) <= FLOAT32_MAX for v in values)
        message = f"{key}={value} is not a finite float32 number: set a finite value"
        source = interpolated_defaults().get(key)
        if problems is not None and source in config and repr(config[source]) == repr(value):
            continue  # it takes the value of `source`, checked itself
        if problems is None:
            require(finite, key, message)
        else:
            problems.run(require, finite, key, message)


SKIPPED = type("Skipped", (), {"__repr__": lambda self: "SKIPPED"})()  # what a check that did not pass returns


class Problems:
    """Pre-flight's findings, so that one run reports every independent problem (one line each, in check order).

    `run(check, *args)` runs one group of related checks (it stops at its own first problem) and returns its value,
    or SKIPPED when it failed or could not run: a check given a SKIPPED value (it needs what an earlier one failed
    to produce) is not run, and one that read a config key already reported is dropped, as it would only repeat
    that problem or trip over the bad value."""

    def __init__(self) -> None:
        self.errors: list[ConfigError] = []
        self.keys: set[str] = set()

    def run(self, check, *args, **kwargs):
        from dagrl.config.tree import recording

        if any(arg is SKIPPED for arg in [*args, *kwargs.values()]):
            return SKIPPED
        with recording() as reads:
            try:
                result = check(*args, **kwargs)
            except ConfigError as error:
                if error.key not in self.keys and not reads & self.keys:
                    self.errors.append(error)
                    self.keys.add(error.key)
                return SKIPPED
            except Exception:  # noqa: BLE001 - a bad value already reported broke this check: skip it
                if reads & self.keys:
                    return SKIPPED
                raise
        return SKIPPED if reads & self.keys else result

    def raise_if_any(self) -> None:
        from dagrl.config.errors import ConfigErrors

        if len(self.errors) > 1:
            raise ConfigErrors(self.errors)
        if self.errors:
            raise self.errors[0]


def require(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(key, message)


_INTERPOLATION = re.compile(r"^\$\{([A-Za-z0-9_.]+)\}$")


@functools.lru_cache(maxsize=None)
def interpolated_defaults() -> dict[str, str]:
    """Keys whose default in conf/<group>/default.yaml is exactly `${other.key}` -> that other key (e.g.
    critic.megatron.seed -> actor_rollout_ref.actor.megatron.seed)."""
    import yaml

    from dagrl.config.load import CONF_DIR

    found: dict[str, str] = {}

    def walk(node, prefix: str) -> None:
        if isinstance(node, dict):
            for name, value in node.items():
                walk(value, f"{prefix}.{name}" if prefix else str(name))
        elif isinstance(node, str) and _INTERPOLATION.match(node):
            found[prefix] = _INTERPOLATION.match(node).group(1)

    for path in sorted(Path(CONF_DIR).glob("*/default.yaml")):
        try:
            walk(yaml.safe_load(path.read_text()) or {}, path.parent.name)
        except (OSError, yaml.YAMLError):  # conf/ is composed before pre-flight: a broken file failed there
            continue
    return found


def source_key(cfg: Cfg, key: str) -> str:
    """The key the user set for `key`: `key` itself, or, when its default interpolates another key and the two
    hold the same value, that key (followed through chains: critic.forward_micro_batch_size_per_gpu ->
    critic.ppo_micro_batch_size_per_gpu -> actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu)."""
    sources = interpolated_defaults()
    seen = {key}
    while key in sources and sources[key] not in seen:
        try:
            same = get(cfg, sources[key]) == get(cfg, key)
        except (KeyError, AttributeError, TypeError):
            break
        if not same:
            break
        key = sources[key]
        seen.add(key)
    return key


def named(cfg: Cfg, key: str) -> tuple[str, str]:
    """(the key an error is filed under, how the message names it): a value that came through an interpolation
    is filed under the key the user set and named as `derived (from source)`."""
    source = source_key(cfg, key)
    return (key, key) if source == key else (source, f"{key} (from {source})")


def alias(cfg: Cfg, canonical: str, alias: str):
    value, alias_value = get(cfg, canonical), get(cfg, alias)
    require(alias_value is None or alias_value == value, alias,
            f"{alias}={alias_value} conflicts with {canonical}={value}: set only {canonical} (the canonical key), "
            f"or give both the same value")
    return value


def positive_int(cfg: Cfg, dotted: str) -> int:
    value = get(cfg, dotted)
    key, name = named(cfg, dotted)
    require(isinstance(value, int) and not isinstance(value, bool) and value > 0, key,
            f"{name}={value!r} must be a positive integer")
    return value


def divides(numerator: int, denominator: int, key: str, what: str) -> None:
    require(denominator > 0 and numerator % denominator == 0, key, f"{what}: {numerator} is not divisible by "
            f"{denominator}; change {key}")


def non_negative(cfg: Cfg, dotted: str, upper: float | None = None) -> float:
    value = get(cfg, dotted)
    key, name = named(cfg, dotted)
    require(isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
            and (upper is None or value <= upper), key,
            f"{name}={value!r} must be a number >= 0" + (f" and <= {upper}" if upper is not None else ""))
    return value


@contextlib.contextmanager
def as_config_error(key: str):
    """Checks of other modules raise ValueError with a complete one-line message; re-raise it as ConfigError."""
    try:
        yield
    except ConfigError:
        raise
    except ValueError as err:
        raise ConfigError(key, str(err)) from err


def as_list(value) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def read_hf_config(model_path: str | None, key: str = "actor_rollout_ref.model.path") -> dict:
    """The config.json of the HF model directory that config key `key` names."""
    require(bool(model_path), key, f"{key} is not set: point it at a local HF model directory")
    path = Path(os.path.expanduser(model_path))
    if path.is_file():
        kind = "a GGUF file (llama.cpp's format)" if path.suffix.lower() == ".gguf" else f"a file ({path.name})"
        raise ConfigError(key, f"{key}={path} is {kind}, not a model directory: point {key} at the HF model "
                               f"directory (config.json, *.safetensors, tokenizer files)"
                               + (f", e.g. {path.parent}" if path.name == "config.json" else ""))
    require(path.is_dir(), key, f"model directory {path} does not exist: fix {key}")
    config_file = path / "config.json"
    if not config_file.is_file():  # say what the directory is instead (GGUF, the hub cache, a Megatron checkpoint)
        from dagrl.config.model_files import missing_config_hint
        raise ConfigError(key, f"{config_file} is missing: {key} must be an HF model directory"
                               f"{missing_config_hint(path, key)}")
    try:
        hf_config = json.loads(config_file.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(key, f"{config_file} is not valid JSON ({err}): fix or re-download the model that {key} "
                               f"names") from None
    require(isinstance(hf_config, dict), key, f"{config_file} holds a JSON {type(hf_config).__name__}, not an HF "
                                              f"model config (a JSON object): fix or re-download the model {key} names")
    model_type = hf_config.get("model_type")
    require(model_type is not None, key, f"{config_file} has no model_type: it is not an HF model config; fix or "
                                         f"re-download the model {key} names")
    require(model_type in SUPPORTED_MODEL_TYPES, key,
            f"model type {model_type!r} in {config_file} is not supported; supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    check_hf_config_fields(hf_config, config_file, key)
    return hf_config


# config.json fields the layout checks and the model builder read: (name, required), each a positive integer
HF_INT_FIELDS = (("hidden_size", True), ("num_attention_heads", True), ("num_hidden_layers", True),
                 ("vocab_size", True), ("intermediate_size", True), ("num_key_value_heads", False),
                 ("max_position_embeddings", False))


def check_hf_config_fields(hf_config: dict, config_file: Path, key: str) -> None:
    """The sizes in config.json are positive integers (a string, null or missing one would fail in the layout
    arithmetic or build a model of transformers' defaults), tie_word_embeddings a boolean."""
    for name, required in HF_INT_FIELDS:
        value = hf_config.get(name)
        if value is None and not required and name not in hf_config:
            continue
        if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            what = f"has {name}={value!r}, not a positive integer" if name in hf_config else f"has no {name}"
            raise ConfigError(key, f"{config_file} {what}: fix or re-download the model {key} names")
    # grouped-query attention: each KV head serves a whole group of query heads
    heads, kv_heads = hf_config["num_attention_heads"], hf_config.get("num_key_value_heads") or 0
    require(not kv_heads or (kv_heads <= heads and heads % kv_heads == 0), key,
            f"{config_file} has num_attention_heads={heads} and num_key_value_heads={kv_heads}: query heads must "
            f"be a multiple of the key/value heads; fix or re-download the model {key} names")
    require("head_dim" in hf_config or hf_config["hidden_size"] % heads == 0, key,
            f"{config_file} has hidden_size={hf_config['hidden_size']}, not divisible by num_attention_heads={heads} "
            f"(and no head_dim): fix or re-download the model {key} names")
    tie = hf_config.get("tie_word_embeddings", False)
    require(isinstance(tie, bool), key, f"{config_file} has tie_word_embeddings={tie!r}, not true or false: fix or "
                                        f"re-download the model {key} names")


def check_tokenizer_files(model_path: str) -> None:
    """The tokenizer and chat template the prompts need, from the files alone (transformers is not imported)."""
    key = "actor_rollout_ref.model.path"
    path = Path(os.path.expanduser(model_path))
    tokenizer_config = path / "tokenizer_config.json"
    require(any((path / name).is_file() for name in ("tokenizer.json", "tokenizer.model", "vocab.json")), key,
            f"{path} has no tokenizer (tokenizer.json, tokenizer.model or vocab.json): copy the model's tokenizer "
            f"files into the directory {key} names")
    try:
        settings = json.loads(tokenizer_config.read_text()) if tokenizer_config.is_file() else {}
    except json.JSONDecodeError as err:
        raise ConfigError(key, f"{tokenizer_config} is not valid JSON ({err}): fix or re-download it") from None
    require(bool(settings.get("chat_template")) or (path / "chat_template.jinja").is_file()
            or (path / "chat_template.json").is_file(), key,
            f"the tokenizer in {path} has no chat template (none in tokenizer_config.json, no chat_template.jinja) "
            f"and prompts are chat lists: point {key} at an instruct/chat model, or add its template there")


def layout_from_config(megatron: Cfg):
    """The actor's ParallelLayout from actor_rollout_ref.actor.megatron.* (reference and critic reuse it)."""
    from dagrl.placement import PARALLEL_SIZE_NAMES, ParallelLayout

    tp = megatron.tensor_model_parallel_size
    sequence_parallel = bool(megatron.sequence_parallel) and tp > 1
    if megatron.sequence_parallel and tp == 1:
        logger.warning("actor_rollout_ref.actor.megatron.sequence_parallel=true has no effect with TP=1: turned off")
    return ParallelLayout(**{name: megatron[name] for name in PARALLEL_SIZE_NAMES},
                          sequence_parallel=sequence_parallel)
