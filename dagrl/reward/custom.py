"""Loads a user's reward function from a Python file (`custom_reward_function.path` / `.name`).

Runs in pre-flight, before any model is built, so a wrong path or name fails in a second: no torch import here.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import inspect
import logging
import os
import sys
from typing import Callable

logger = logging.getLogger(__name__)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def load_custom_reward_fn(path: str, name: str = "compute_score", reward_kwargs: dict | None = None) -> Callable:
    """read_custom_reward_fn, said in the log (the trainer's; pre-flight reads it silently: its checks go on)."""
    function = read_custom_reward_fn(path, name, reward_kwargs)
    logger.info("using custom reward function %s from %s", name, os.path.abspath(os.path.expanduser(path)))
    return function


def read_custom_reward_fn(path: str, name: str = "compute_score", reward_kwargs: dict | None = None) -> Callable:
    """The function `name` defined in the Python file `path`.

    It is called as `fn(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)` and returns a
    float or a dict with a "score" key; a function whose signature cannot take that call is refused here.
    """
    given, path = path, os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        dotted = all(part.isidentifier() for part in given.split(".")) and "." in given and not given.endswith(".py")
        module = f" (a module name? give the file: {given.replace('.', '/')}.py)" if dotted else ""
        shown = (
            repr(path)
            if os.path.isabs(os.path.expanduser(given))
            else f"{given!r} (a relative path: read from the current directory)"
        )
        raise ValueError(f"custom reward file {shown} does not exist{module}; fix custom_reward_function.path")
    if not path.endswith(".py"):
        raise ValueError(f"custom reward file {path!r} is not a .py file; fix custom_reward_function.path")
    # A name unique per file, registered in sys.modules, so the function pickles by reference (Ray, spawn).
    module_name = "dagrl_custom_reward_" + hashlib.sha1(path.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ValueError(
            f"custom reward file {path!r} cannot be loaded as a Python module; fix custom_reward_function.path"
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    printed = io.StringIO()  # what the module prints while it fails (argparse's usage) joins the one line
    try:
        with contextlib.redirect_stderr(printed):
            spec.loader.exec_module(module)
    except SystemExit as error:  # argparse at module level, or an explicit sys.exit: never end the trainer
        del sys.modules[module_name]
        said = [line for line in printed.getvalue().splitlines() if line.strip()]
        raise ValueError(
            f"custom reward file {path!r} called sys.exit({'' if error.code is None else error.code!r}) "
            f"while being imported{f' ({said[-1].strip()})' if said else ''}: module-level code runs at "
            f'import (argparse.parse_args, sys.exit); move it under `if __name__ == "__main__":`'
        ) from None
    except Exception as error:
        del sys.modules[module_name]
        raise ValueError(
            f"custom reward file {path!r} failed to import ({_first_line(error)}); fix the file named "
            f"by custom_reward_function.path"
        ) from error
    else:
        sys.stderr.write(printed.getvalue())  # a module that imported fine keeps its output
    function = getattr(module, name, None)
    if function is None:
        defined = sorted(
            k
            for k, v in vars(module).items()
            if callable(v) and not k.startswith("_") and getattr(v, "__module__", None) == module_name
        )
        raise ValueError(
            f"custom reward file {path!r} has no function {name!r} (it defines {defined}); fix "
            f"custom_reward_function.name or custom_reward_function.path"
        )
    if not callable(function):
        raise ValueError(
            f"{name!r} in custom reward file {path!r} is a {type(function).__name__}, not a function; "
            f"fix custom_reward_function.name"
        )
    check_reward_kind(function, path, name)
    check_reward_signature(function, path, name, reward_kwargs)
    return function


def check_reward_kind(function: Callable, path: str, name: str) -> None:
    """The trainer calls the function and uses what it returns at once (a float or a dict with "score"): a class
    returns an instance, an `async def` a coroutine and a generator function a generator, never a score."""
    where = f"{name!r} in custom reward file {path!r}"
    define = (
        f"define it as def {name}(data_source, solution_str, ground_truth, extra_info=None, **kwargs) returning a float"
    )
    if inspect.isclass(function):
        raise ValueError(f"{where} is a class: calling it makes an instance, not a score; {define}")
    if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
        raise ValueError(
            f"{where} is an async def: it returns a coroutine that the trainer would not await; "
            f"{define} (a plain def, not async)"
        )
    if inspect.isgeneratorfunction(function):
        raise ValueError(
            f"{where} is a generator function (it yields): calling it returns a generator, not a score; "
            f"{define} (return, not yield)"
        )


def check_reward_signature(function: Callable, path: str, name: str, reward_kwargs: dict | None = None) -> None:
    """The trainer calls `function(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)`
    (dagrl/reward/manager.py): a function that cannot take that call would fail on every response. Raises a
    one-line ValueError naming the function, its file and its signature."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin or C function without a signature: its calls will tell
        return
    kwargs = dict(reward_kwargs or {})
    try:
        signature.bind("data_source", "solution_str", "ground_truth", {}, **kwargs)
    except TypeError as error:
        call = ", ".join(
            ["data_source", "solution_str", "ground_truth", "extra_info", *(f"{key}=..." for key in kwargs)]
        )
        extra = " (the keys of custom_reward_function.reward_kwargs)" if kwargs else ""
        raise ValueError(
            f"custom reward function {name}{signature} in {os.path.abspath(os.path.expanduser(path))!r} "
            f"cannot take the trainer's call {name}({call}){extra}: {error}; define it as "
            f"def {name}(data_source, solution_str, ground_truth, extra_info=None, **kwargs)"
        ) from None
