"""Node functions from their 'module:function' specs: imported (a user's), or, in pre-flight, only found (dagrl's own,
whose modules import torch), with each problem one line naming the node's key."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from dagrl.config.errors import ConfigError


def import_function(spec: str, key: str) -> Callable[..., Any]:
    """'pkg.module:function' -> the function; ConfigError naming `key` when it cannot be loaded."""
    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        raise ConfigError(key, f"{key}={spec!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(key, f"{key}={spec!r}: cannot import module {module_name!r} ({err})") from None
    function = getattr(module, function_name, None)
    if function is not None and not callable(function):  # a list or a dict of nodes where a function goes
        raise ConfigError(
            key,
            f"{key}={spec!r}: {function_name} in module {module_name!r} is a "
            f"{type(function).__name__}, not a function: name a function (def "
            f"{function_name}(): return [...])",
        )
    if not callable(function):
        raise ConfigError(key, f"{key}={spec!r}: module {module_name!r} has no function {function_name!r}")
    return function


def check_node_signature(fn: Callable[..., Any], key: str, spec: str) -> None:
    """run_graph calls `fn(ctx, batch)`: a function that cannot take that call would fail at the first step."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C function without a signature: its call will tell
        return
    try:
        signature.bind("ctx", "batch")
    except TypeError as error:
        raise ConfigError(
            key,
            f"{key}={spec}: {getattr(fn, '__name__', 'fn')}{signature} cannot take the trainer's "
            f"call fn(ctx, batch) ({error}); define it as def fn(ctx, batch) returning "
            f"(batch, metrics)",
        ) from None


@dataclass(frozen=True)
class StandIn:
    """Pre-flight's stand-in for a dagrl node function `spec`: found, not imported (its module imports torch). The
    trainer takes pre-flight's graph with the function itself in its place (graph.imported)."""

    spec: str

    def __call__(self, ctx: Any, batch: Any) -> Any:
        raise AssertionError(f"pre-flight's stand-in for {self.spec} is never run: the trainer imports the function")


def lazy_import(spec: str, key: str) -> Callable[..., Any]:
    """import_function for a user's function; dagrl's own (`dagrl.` modules, which import torch and are tested)
    only checked to exist, with a StandIn in its place (pre-flight)."""
    module_name, sep, function_name = spec.partition(":")
    if not spec.startswith("dagrl.") or not sep or not function_name:  # the user's, or a malformed spec
        return import_function(spec, key)
    try:
        found = importlib.util.find_spec(module_name) is not None
    except ImportError:  # a parent package that does not exist
        found = False
    if not found:
        raise ConfigError(key, f"{key}={spec!r}: cannot import module {module_name!r} (no such dagrl module)")
    names, functions = _top_level_names(module_name)
    if names is not None and function_name not in names:
        public = sorted(name for name in functions if not name.startswith("_"))
        raise ConfigError(
            key,
            f"{key}={spec!r}: module {module_name!r} has no function {function_name!r} (it "
            f"defines {', '.join(public[:8])}{', ...' if len(public) > 8 else ''}): fix the name",
        )
    return StandIn(spec)


def _top_level_names(module_name: str) -> tuple[set[str] | None, set[str]]:
    """The names a dagrl module's source binds at top level and the functions it defines, read with ast (the module
    itself imports torch); (None, empty) when its source cannot be read."""
    import ast

    origin = importlib.util.find_spec(module_name).origin
    try:
        tree = ast.parse(Path(origin).read_text(encoding="utf-8"))
    except (OSError, TypeError, SyntaxError, ValueError):
        return None, set()
    names: set[str] = set()
    functions = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names, functions
