"""Where conf/ lives, composing it outside `@hydra.main`, and checking command-line overrides early.

Hydra in struct mode already rejects unknown keys, but its message does not say which key was meant, and a
`+key` would be appended silently anywhere. `check_overrides` runs first: an unknown key fails naming the
closest valid one; `+key` is allowed only under the free-form maps users extend.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from dagrl.config.errors import ConfigError

_PACKAGE_DIR = Path(__file__).resolve().parent.parent
# A source checkout keeps conf/ beside the package; an installed wheel ships it as dagrl/conf.
CONF_DIR = next((p for p in (_PACKAGE_DIR.parent / "conf", _PACKAGE_DIR / "conf") if (p / "dagrl.yaml").is_file()),
                _PACKAGE_DIR / "conf")
CONFIG_NAME = "dagrl"

# Maps whose keys are the user's own: `+<map>.<key>=value` adds to them and reaches the code that reads them.
FREEFORM_MAPS = (
    "actor_rollout_ref.actor.megatron.override_transformer_config",
    "custom_reward_function.reward_kwargs",
    "actor_rollout_ref.rollout.engine_kwargs.vllm",
)


# verl's keys that dagrl names or shapes differently: an override of one gets the dagrl key in its error line
VERL_KEYS = {
    "async_training.staleness_threshold": "dagrl bounds staleness in whole weight versions: set "
                                          "async_training.max_staleness=K (an integer >= 0)",
    "async_training.require_batches": "dagrl trains on data.train_batch_size groups a step; groups kept in flight "
                                      "are async_training.oversample_ratio x that",
    "async_training.partial_rollout_resume": "partial rollouts always resume from the checkpoint's pool "
                                             "(async_training.partial_rollout=true)",
}


def config_groups() -> set[str]:
    return {p.name for p in CONF_DIR.iterdir() if p.is_dir()}


def _lookup(tree: Any, dotted: str) -> tuple[bool, Any]:
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _all_paths(tree: dict[str, Any], prefix: str = "") -> list[str]:
    paths = []
    for key, value in tree.items():
        full = f"{prefix}.{key}" if prefix else key
        paths.append(full)
        if isinstance(value, dict):
            paths.extend(_all_paths(value, full))
    return paths


def closest_key(key: str, tree: dict[str, Any]) -> str | None:
    """The valid dotted key most like `key` (same leaf name preferred)."""
    candidates = [c for c in _all_paths(tree) if not key.startswith(c + ".")]
    leaf = key.rsplit(".", 1)[-1]
    same_leaf = [c for c in candidates if c.rsplit(".", 1)[-1] == leaf]
    if len(same_leaf) == 1:
        return same_leaf[0]
    match = difflib.get_close_matches(key, same_leaf or candidates, n=1, cutoff=0.5)
    return match[0] if match else None


def check_overrides(overrides: list[str], base: dict[str, Any]) -> None:
    """Raise ConfigError for an override that names no key of `base` (the composed default config)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import OverrideParseException

    groups = config_groups()
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as err:
        raise ConfigError("overrides", f"cannot parse the command line: {str(err).splitlines()[0]}") from None
    for override in parsed:
        key = override.key_or_group
        if key.startswith("hydra.") or key == "hydra" or (key in groups and "." not in key):
            continue
        exists, _ = _lookup(base, key)
        adding = override.type in (OverrideType.ADD, OverrideType.FORCE_ADD)
        freeform = next((m for m in FREEFORM_MAPS if key.startswith(m + ".")), None)
        if freeform:
            if not exists and not adding:
                raise ConfigError(key, f"'{key}' adds a key to the free-form map {freeform}: write it as +{key}=...")
            continue
        if exists:
            continue
        if key in VERL_KEYS:
            raise ConfigError(key, f"'{key}' is verl's; {VERL_KEYS[key]}")
        hint = closest_key(key, base)
        plus = " ('+' adds keys only under: " + ", ".join(FREEFORM_MAPS) + ")" if adding else ""
        fix = f"; did you mean '{hint}'?" if hint else ""
        raise ConfigError(key, f"unknown config key '{key}'{fix}{plus}")


def compose(overrides: list[str] | None = None) -> dict[str, Any]:
    """The resolved config as plain data, exactly as `python3 -m dagrl.main_dag <overrides>` would see it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    overrides = list(overrides or [])
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        base = OmegaConf.to_container(hydra_compose(CONFIG_NAME), resolve=False)
        check_overrides(overrides, base)
        cfg = hydra_compose(CONFIG_NAME, overrides=overrides)
    return to_plain(cfg)


def to_plain(cfg: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(cfg, resolve=True)
    data.pop("hydra", None)
    return data
