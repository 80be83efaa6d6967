"""Where conf/ lives, and what its default files say of themselves: the keys whose default is another key
(`${...}`). Read by composition, the schema and pre-flight alike; imports nothing of dagrl."""
from __future__ import annotations

import functools
import re
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent
# A source checkout keeps conf/ beside the package; an installed wheel ships it as dagrl/conf.
CONF_DIR = next((p for p in (_PACKAGE_DIR.parent / "conf", _PACKAGE_DIR / "conf") if (p / "dagrl.yaml").is_file()),
                _PACKAGE_DIR / "conf")
CONFIG_NAME = "dagrl"

_INTERPOLATION = re.compile(r"^\$\{([A-Za-z0-9_.]+)\}$")


@functools.lru_cache(maxsize=None)
def interpolated_defaults() -> dict[str, str]:
    """Keys whose default in conf/<group>/default.yaml is exactly `${other.key}` -> that other key (e.g.
    critic.megatron.seed -> actor_rollout_ref.actor.megatron.seed)."""
    import yaml

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


@functools.lru_cache(maxsize=None)
def followers() -> dict[str, list[str]]:
    """{key: the keys whose default is exactly `${key}`} (critic.shuffle follows actor_rollout_ref.actor.shuffle):
    interpolated_defaults() turned around."""
    found: dict[str, list[str]] = {}
    for key, source in interpolated_defaults().items():
        found.setdefault(source, []).append(key)
    return found
