"""Every key's type, range and choices (declared in dagrl/config/schema/<group>.py), checked once at the start of
pre-flight. A failure is one line: the key, the value, the expectation: `data.shuffle='no' must be true or false`,
`actor_rollout_ref.rollout.top_p=5 must be a number in (0, 1]`. tests/config/test_schema.py proves that every key
of the composed config is declared and every numeric key has a range."""

from __future__ import annotations

import functools
import math
from typing import Any

from omegaconf import OmegaConf

from dagrl.algo.catalog import REGISTRIES
from dagrl.config.checks import get, named
from dagrl.config.conf_dir import CONF_DIR
from dagrl.config.errors import ConfigError, require
from dagrl.config.schema.root import Config, followers, interpolated_defaults, keys
from dagrl.config.schema.spec import NOUNS, PATH_KINDS, Range
from dagrl.config.tree import Cfg

MISSING = object()

# characters a value copied from a web page or a word processor brings along: Hydra's grammar refuses them
LOOKALIKES = {
    "\u2212": "-",
    "\u2013": "-",
    "\u2014": "-",
    "\u2010": "-",
    "\u2011": "-",
    "\u201c": '"',
    "\u201d": '"',
    "\u201e": '"',
    "\u2018": "'",
    "\u2019": "'",
    "\u00a0": " ",
    "\u2009": " ",
    "\u202f": " ",
    "\u00d7": "x",
}


@functools.lru_cache(maxsize=1)
def default_config() -> dict[str, Any]:
    """Every declared key at its default, resolved (as compose() without overrides, minus Hydra): conf/'s YAML is
    written from the declarations, all but the graph, whose default option (conf/dagrl.yaml's dag: grpo) is written
    by hand."""
    tree = Config().snapshot()
    defaults = OmegaConf.load(CONF_DIR / "dagrl.yaml").defaults
    graph = next(entry.dag for entry in defaults if not isinstance(entry, str) and "dag" in entry)
    tree["dag"] = OmegaConf.load(CONF_DIR / "dag" / f"{graph}.yaml")
    return OmegaConf.to_container(OmegaConf.create(tree), resolve=True)


@functools.lru_cache(maxsize=1)
def schema() -> dict[str, str]:
    """{dotted key: type} of every declared key ("T?" = T or null); free-form maps are "dict"."""
    return {path: key.kind for path, key in keys().items()}


def range_of(key: str) -> Range | None:
    return keys()[key].range if key in keys() else None


def choices_of(key: str):
    """The names a key takes (a registry's live view for the algorithm keys), or None."""
    return keys()[key].choices if key in keys() else None


def choice_error(key: str, shown: str, allowed) -> str:
    """The line for `key`'s value `shown` outside `allowed`: the reason a registry refuses a name it knows (verl's
    remax), else the names it takes."""
    registry = next((r for r in REGISTRIES if key in r.keys), None)
    refused = registry and registry.refused.get(shown.strip("'"))
    if refused:
        return f"{key}={shown} {refused}"
    return f"{key}={shown} is not one of: {', '.join('null' if a is None else str(a) for a in allowed)}"


def check_choices(cfg: Cfg) -> None:
    """Every key declared with choices holds one of them, a value that came through an interpolation named with
    the key the user set (check_value, in check_schema, names the key itself)."""
    for key, allowed in ((path, k.choices) for path, k in keys().items() if k.choices is not None):
        value = get(cfg, key)
        filed, name = named(cfg, key)
        require(value in allowed, filed, choice_error(name, repr(value), allowed))


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
    if kind == "graph":
        return isinstance(value, (dict, list))
    if kind in ("paths", "files"):
        return isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
    if kind in PATH_KINDS:
        return isinstance(value, str)
    return isinstance(value, {"int": int, "str": str, "list": list, "dict": dict, "switches": dict}[kind])


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
    allowed = choices_of(key)
    if allowed is not None and value is not None:
        if isinstance(value, bool) or value not in allowed:
            raise ConfigError(key, choice_error(key, show(value), allowed))
    bound = range_of(key) if kind.rstrip("?") in ("int", "float", "list") else None
    if not type_ok(kind, value):
        ratio = f"{key}_ratio"  # lr_warmup_steps=0.1: a fraction meant for lr_warmup_steps_ratio
        hint = (
            f" (a fraction of all steps is {ratio})"
            if kind.rstrip("?") == "int" and isinstance(value, float) and 0 < value < 1 and ratio in schema()
            else ""
        )
        if not hint and value is None and bound is not None and bound.hint:
            hint = f" ({bound.hint})"  # null where a number goes: say what the special values are instead
        text = _number_as_text(key, kind, value)
        if text:  # '1e-5' (quoted), '3e-6\' (a pasted line continuation): the number is there, the text is the fault
            raise ConfigError(key, f"{key}={show(value)} must be {expected(kind, bound)}, not text: {text}")
        raise ConfigError(
            key, f"{key}={show(value)} must be {expected(kind, bound)}{hint}{_followed(key, value, config)}"
        )
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
        return (
            f"it was quoted (or came from a YAML file, which reads 1e-5 without a '.' as text): write "
            f"{key}={cleaned} unquoted"
        )
    if value.rstrip().endswith("\\"):
        return (
            f"it ends with a backslash (a line continuation pasted into the value?): write {key}={cleaned}, "
            f"with a space before any '\\' that continues the command"
        )
    return f"write {key}={cleaned} (plain ASCII digits, no spaces or quotes)"


def _followed(key: str, value: Any, config: dict[str, Any] | None) -> str:
    """Interpolated keys that follow the key named (and have its value): say so (the fix also sets them)."""
    keys = [k for k in followers().get(key, []) if config is None or _lookup(config, k) == value]
    return f" ({', '.join(keys)} take{'s' if len(keys) == 1 else ''} the value from {key})" if keys else ""


def check_schema(config: dict[str, Any], problems=None) -> None:
    """Every key of the schema, in conf/'s order: the first wrong type or out-of-range value raises ConfigError;
    with `problems` (errors.Problems), every such key not reported yet is."""
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
