"""Loading verl-style YAML lists of classes (tools, interactions): the file, its entries, their classes.

Every problem is a ConfigError naming the key, the file and the entry, raised in pre-flight before any model is
built (the CLI prints it in one line and exits 2).
"""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any

from dagrl.config.errors import ConfigError


def load_entries(path: str, key: str, list_key: str) -> list[dict]:
    """The `list_key` list of the YAML file at `path` (each entry a mapping), for config key `key`."""
    import yaml

    path = os.path.expanduser(str(path))
    if os.path.isdir(path):
        raise ConfigError(key, f"{key}={path!r} is a directory; point it at a YAML file with a {list_key!r} list")
    if not os.path.isfile(path):
        raise ConfigError(key, f"{key}={path!r}: no such file; point it at a YAML file with a {list_key!r} list")
    try:
        with open(path) as f:
            document = yaml.safe_load(f)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)  # where, and what the parser found there (a tab, a ':')
        what = getattr(error, "problem", None) or str(error).splitlines()[0]
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(
            key, f"{key}: {path} is not valid YAML: {what}{at} (YAML indents with spaces, never tabs); fix the file"
        ) from None
    entries = document.get(list_key) if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(key, f"{key}: {path} must hold a non-empty {list_key!r} list")
    for number, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
            raise ConfigError(key, f"{key}: {path}, {list_key}[{number}] must be a mapping with a class_name")
    return entries


def import_class(spec: str, key: str, where: str) -> type:
    """`package.module.ClassName` (verl's form) or `package.module:ClassName`; `where` names the file and entry."""
    module_name, sep, class_name = spec.partition(":")
    if not sep:
        module_name, _, class_name = spec.rpartition(".")
    if not module_name or not class_name:
        raise ConfigError(key, f"{key}: {where}: class_name {spec!r} must be package.module.ClassName")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # any import failure is the user's to fix: name it
        raise ConfigError(
            key,
            f"{key}: {where}: cannot import {module_name!r} for class_name {spec!r} ({type(error).__name__}: {error})",
        ) from None
    cls = getattr(module, class_name, None)
    if cls is not None and not inspect.isclass(cls):  # a function or an instance: the entry constructs a class
        raise ConfigError(
            key,
            f"{key}: {where}: {spec} is a {type(cls).__name__}, not a class: class_name names a "
            f"class the trainer constructs as {class_name}(config, ...) (see docs/agentic.md)",
        )
    if not inspect.isclass(cls):
        raise ConfigError(key, f"{key}: {where}: module {module_name!r} has no class {class_name!r}")
    return cls


def construct(cls: type, key: str, where: str, class_name: str, **kwargs: Any) -> Any:
    """`cls(**kwargs)`; an exception from the user's class is reported with its entry, in one line."""
    try:
        return cls(**kwargs)
    except Exception as error:
        lines = str(error).strip().splitlines()
        raise ConfigError(
            key,
            f"{key}: {where}: {class_name}({', '.join(kwargs)}) raised "
            f"{type(error).__name__}: {lines[0] if lines else ''}",
        ) from None


def check_calls(obj: Any, key: str, where: str, class_name: str, calls: dict[str, tuple[str, ...]], base: str) -> None:
    """Every method the turn loop calls exists and takes the positional arguments it passes (`calls`: method ->
    argument names; keyword arguments come from each row and cannot be checked here): a wrong arity would fail on
    every call of every trajectory, deep in a rollout. `base` names the class to subclass."""
    for method, args in calls.items():
        function = getattr(obj, method, None)
        if not callable(function):
            raise ConfigError(key, f"{key}: {where}: class {class_name!r} has no {method} method (subclass {base})")
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):  # a builtin or C method without a signature: its calls will tell
            continue
        try:
            signature.bind(*args)
        except TypeError as error:
            raise ConfigError(
                key,
                f"{key}: {where}: {class_name}.{method}{signature} cannot take the turn loop's "
                f"call {method}({', '.join(args)}) ({error}); define it as "
                f"{method}(self, {', '.join(args)}, **kwargs), as {base} does",
            ) from None


async def maybe_await(value: Any) -> Any:
    """verl's tool and interaction methods are coroutines; plain methods are accepted too."""
    if inspect.isawaitable(value):
        return await value
    return value
