"""What Hydra or OmegaConf refuses while composing, as one line naming the override or file and the fix."""

from __future__ import annotations

import os
import re
from typing import Any

from dagrl.config.config_keys import closest_key, lookup
from dagrl.config.errors import ConfigError
from dagrl.config.schema.root import freeform_maps


def composition_error(err: Exception, overrides: list[str], base: dict[str, Any]) -> ConfigError:
    """What Hydra or OmegaConf refused after check_overrides passed (a `${...}` naming no key, ...), in one line
    naming the override it came from."""
    from omegaconf.errors import InterpolationKeyError

    key = getattr(err, "full_key", None) or "overrides"
    text = next((o for o in reversed(overrides) if o.lstrip("+~").split("=", 1)[0] == key), None)  # the last wins
    where = f"override '{text}'" if text else f"config key '{key}'" if key != "overrides" else "the overrides"
    missing = re.search(r"key '([^']+)'", str(err)) if isinstance(err, InterpolationKeyError) else None
    if missing and "." not in missing[1] and (missing[1].isupper() or missing[1] in os.environ):
        name = missing[1]  # ${HOME}: the shell's syntax, which OmegaConf reads as a config key
        return ConfigError(
            key,
            f"{where}: ${{{name}}} is read as a config key, not the environment variable: write "
            f'${{oc.env:{name}}}, or let the shell expand it (double quotes: "...=${name}/...")',
        )
    if missing:
        hint = closest_key(missing[1], base)
        fix = f"did you mean ${{{hint}}}?" if hint else "point it at an existing one, e.g. ${trainer.experiment_name}"
        return ConfigError(key, f"{where}: the interpolation ${{{missing[1]}}} names no config key; {fix}")
    if "Recursive interpolation" in str(err):
        circle = interpolation_cycle(key, overrides, base)
        return ConfigError(
            key,
            f"{where}: the interpolations go round in a circle ({circle or key}): give one of these keys a plain value",
        )
    if "HydraConfig was not set" in f"{err} {err.__cause__}":
        used = re.search(r"\$\{hydra:[^}]*\}", text or "")
        return ConfigError(
            key,
            f"{where}: {used[0] if used else '${hydra:...}'} reads Hydra's job settings, which dagrl's config "
            f"is composed without: write the value itself ({key}=...), or take it from the environment with "
            f"${{oc.env:NAME}}",
        )
    resolver = re.search(r"Unsupported interpolation type (\S+)", str(err))
    if resolver:  # ${env:HOME} (OmegaConf 1's name), a resolver nobody registered
        fix = (
            "OmegaConf 2 names it oc.env: ${oc.env:...}"
            if resolver[1] == "env"
            else "the resolvers are oc.env, oc.decode, oc.select, oc.create, oc.dict.keys, oc.dict.values"
        )
        return ConfigError(key, f"{where}: no interpolation resolver '{resolver[1]}': {fix}")
    merged = re.search(
        r"Error merging override ([^=\s]+)=.*Cannot merge (\w+) with (\w+)", f"{err} {err.__cause__}", re.S
    )
    if merged:  # a map given to a list key, or a list to a map
        given = next((o for o in overrides if o.lstrip("+~").split("=", 1)[0] == merged[1]), merged[1])
        return ConfigError(merged[1], f"override '{given}': {shape_fix(merged[1], base)}")
    env = re.search(r"Environment variable '([^']+)' not found", str(err))
    if env:
        return ConfigError(
            key,
            f"{where}: the environment variable {env[1]} is not set: export {env[1]}=... "
            f"before the run, or give a default: ${{oc.env:{env[1]},<default>}}",
        )
    own = hydra_error(f"{err} {err.__cause__ or ''}", overrides)
    if own:
        return own
    reasons = [str(e).splitlines()[0] for e in (err, err.__cause__) if e is not None and str(e)]
    return ConfigError(key, f"{where}: the config does not compose: {': '.join(reasons)}")


def shape_fix(key: str, base: dict[str, Any]) -> str:
    """What a list key or a map key takes, for a value of the other shape."""
    exists, default = lookup(base, key)
    freeform = key in freeform_maps()
    if isinstance(default, list):
        if default and all(isinstance(item, dict) for item in default):
            return (
                f"{key} is a list of maps: write [{{...}}, ...], or set one item's key, e.g. "
                f"{key}.0.{next(iter(default[0]))}=..."
            )
        example = ",".join(str(item) for item in default) or "a,b"
        return f"{key} is a list, not a map: write it in brackets, e.g. {key}=[{example}]"
    if isinstance(default, dict) or freeform:
        return (
            f"{key} is a map, not a list: add one entry with +{key}.<name>=<value>"
            if freeform
            else f"{key} is a section: set its keys one by one, e.g. {key}.{next(iter(default), '<key>')}=..."
        )
    return f"{key} takes neither a list nor a map here: see docs/config_reference.md"


def _references(value: Any) -> list[str]:
    return re.findall(r"\$\{([\w.]+)\}", value) if isinstance(value, str) else []


def interpolation_cycle(key: str, overrides: list[str], base: dict[str, Any]) -> str:
    """'a -> b -> a': the keys whose `${...}` lead from `key` back to itself ('' when none is found)."""
    given = {o.lstrip("+~").split("=", 1)[0]: o.split("=", 1)[1] for o in overrides if "=" in o}

    def value_of(name: str) -> Any:
        return given[name] if name in given else lookup(base, name)[1]

    def walk(name: str, path: list[str]) -> list[str] | None:
        for ref in _references(value_of(name)):
            if ref == key:
                return [*path, ref]
            if ref not in path:
                found = walk(ref, [*path, ref])
                if found:
                    return found
        return None

    found = walk(key, [key])
    return " -> ".join(found) if found else ""


NOUNS = {"int": "an integer", "float": "a number", "bool": "true or false"}


def env_text_problem(overrides: list[str], config: dict[str, Any]) -> ConfigError | None:
    """`key=${oc.env:NAME}` where the key takes a number or a boolean: oc.env always gives text ('8'); the schema
    would call it quoted, while the fix is oc.decode, which reads the text as YAML does."""
    import yaml

    from dagrl.config.schema.check import schema

    kinds = schema()
    for text in overrides:
        key, _, value = text.lstrip("+~").partition("=")
        name = re.search(r"\$\{oc\.env:([^,}]+)(?:,([^}]*))?\}", value)
        kind = kinds.get(key, "").rstrip("?")
        if not name or "oc.decode" in value or kind not in ("int", "float", "bool"):
            continue
        resolved = lookup(config, key)[1]
        if not isinstance(resolved, str):
            continue
        try:
            decoded = yaml.safe_load(resolved)
        except yaml.YAMLError:
            continue
        number = isinstance(decoded, (int, float)) and not isinstance(decoded, bool)
        if isinstance(decoded, bool) if kind == "bool" else number:
            shell = f"${{{name[1]}:-{name[2].strip()}}}" if name[2] is not None else f"${name[1]}"
            return ConfigError(
                key,
                f"override '{text}': oc.env gives text ({resolved!r}), and {key} takes {NOUNS[kind]}: write "
                f"{key}={shell} (the shell puts the value in), or {key}='${{oc.decode:{name[0]}}}' (oc.decode "
                f"reads the text as YAML does)",
            )
    return None


def yaml_error(err: Exception) -> ConfigError:
    """A config file (a --config-dir graph, an edited conf/ file) that does not parse: its path and the line."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    if mark is None:
        return ConfigError("config", f"a config file is not valid YAML: {problem}")
    return ConfigError(
        mark.name,
        f"{mark.name}, line {mark.line + 1} (column {mark.column + 1}) is not valid YAML: {problem}: fix the file "
        f"there (each key on its own line, `key: value`, brackets closed)",
    )


def hydra_dir_problem(key: str, text: str) -> ConfigError | None:
    """hydra.run.dir / hydra.sweep.dir where Hydra cannot make its directory (it would fail in a traceback): a
    folder is made and removed again in the path's nearest existing folder (permissions alone do not tell: root
    passes them on /proc). A `${...}` part (a date) is left to Hydra."""
    import tempfile

    if key not in ("hydra.run.dir", "hydra.sweep.dir"):
        return None
    value = text.split("=", 1)[1].strip("'\"")
    literal = os.path.expanduser(value.split("${", 1)[0])
    probe = os.path.abspath(literal if "${" not in value or literal.endswith("/") else os.path.dirname(literal) or ".")
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".dagrl_probe_", dir=probe))
        return None
    except OSError as err:
        why = "is a file" if not os.path.isdir(probe) else f"cannot hold a folder: {err.strerror}"
    return ConfigError(
        key,
        f"override '{text}': Hydra cannot create its directory there ({probe} {why}): point {key} at a writable "
        f"folder, e.g. {key}=outputs/run",
    )


def hydra_error(message: str, overrides: list[str]) -> ConfigError | None:
    """What Hydra refused in one of its own overrides (hydra.*, hydra/<group>=...), naming it and the fix."""
    plugin = re.search(r"Could not find '(hydra/\w+)/([^']+)'", message)
    if plugin:
        group, name = plugin[1], plugin[2]
        return ConfigError(
            group,
            f"override '{group}={name}': Hydra has no {group} option '{name}' (a plugin that is not installed?): "
            f"install the plugin that provides it (e.g. pip install hydra-{name}-{group.split('/')[1]}), or drop "
            f"the override",
        )
    found = re.search(r"(?:Error merging override |Could not override ')(hydra\.[\w.]+)", message)
    if not found:
        return None
    key = found[1]
    text = next((o for o in reversed(overrides) if o.lstrip("+~").split("=", 1)[0] == key), key)
    kind = re.search(r"is not a valid (\w+)", message)
    if kind:
        fix = f"{key}=true or {key}=false" if kind[1] == "bool" else f"{key}=<{kind[1]}>"
        return ConfigError(key, f"override '{text}': Hydra's {key} takes a {kind[1]}: write {fix}")
    unknown = re.search(r"Key '([^']+)' not in '([^']+)'", message)
    reason = f"Hydra's {unknown[2]} has no key '{unknown[1]}'" if unknown else message.splitlines()[0]
    return ConfigError(
        key,
        f"override '{text}': {reason}: see Hydra's keys with python3 -m dagrl.main_dag --cfg hydra (hydra.run.dir, "
        f"hydra.job.chdir, ...), or drop the override",
    )


GRAPH_KEYS = ("custom_pipeline_fn", "nodes", "switches")


def graph_shape_problem(config: dict[str, Any], overrides: list[str], dirs: list[str]) -> ConfigError | None:
    """A graph option (a --config-dir DIR/dag/<name>.yaml) that composes to something other than the dag section:
    one line naming the file, instead of a traceback when pre-flight reads it."""
    from dagrl.config.conf_dir import CONF_DIR

    graph = config.get("dag")
    missing = [key for key in GRAPH_KEYS if key not in graph] if isinstance(graph, dict) else list(GRAPH_KEYS)
    if not missing:
        return None
    name = next((o.split("=", 1)[1] for o in reversed(overrides) if o.split("=", 1)[0] == "dag"), "grpo")
    files = [os.path.join(root, "dag", f"{name}.yaml") for root in [*reversed(dirs), str(CONF_DIR)]]
    where = next((path for path in files if os.path.isfile(path)), f"dag/{name}.yaml")
    shape = f"is a {type(graph).__name__}, not a map" if not isinstance(graph, dict) else f"lacks {', '.join(missing)}"
    return ConfigError(
        "dag",
        f"the graph dag={name} ({where}) {shape}: start the file with `defaults: [grpo, _self_]` to "
        f"extend GRPO's graph (see docs/extending.md), or give all of {', '.join(GRAPH_KEYS)} (null, a map, {{}})",
    )
