"""Small checks shared by the pre-flight rules (reading a key, the key a value came from, numbers, aliases).

Every failure is a ConfigError: one line naming the key (or file) and the fix.
"""

from __future__ import annotations

import contextlib

from dagrl.config.schema.root import interpolated_defaults
from dagrl.config.errors import ConfigError, Problems, require
from dagrl.config.tree import Cfg, leaves


def get(cfg: Cfg, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = node[part]
    return node


FLOAT32_MAX = 3.4028234663852886e38


def check_finite_numbers(cfg: Cfg, problems: Problems | None = None) -> None:
    """No NaN, inf or float32 overflow anywhere in the config (lr=inf trains NaN weights, lr=1e39 cannot reach the
    fp32 optimizer, a nan coefficient poisons every loss). With `problems`, every such key is reported."""
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
    require(
        alias_value is None or alias_value == value,
        alias,
        f"{alias}={alias_value} conflicts with {canonical}={value}: set only {canonical} (the canonical key), "
        f"or give both the same value",
    )
    return value


def positive_int(cfg: Cfg, dotted: str) -> int:
    value = get(cfg, dotted)
    key, name = named(cfg, dotted)
    require(
        isinstance(value, int) and not isinstance(value, bool) and value > 0,
        key,
        f"{name}={value!r} must be a positive integer",
    )
    return value


def divides(numerator: int, denominator: int, key: str, what: str) -> None:
    require(
        denominator > 0 and numerator % denominator == 0,
        key,
        f"{what}: {numerator} is not divisible by {denominator}; change {key}",
    )


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
