"""Pre-flight of what the path-like keys hold, before anything opens them: a shell variable the shell did not expand
(`$DATA/train.parquet` in single quotes, or from a config file), and user code named by a file path where dagrl
imports a module (`dag.custom_pipeline_fn=graphs.py:build`) or with the function name glued on
(`custom_reward_function.path=reward.py:compute_score`). Otherwise these are reported as a file that "does not
exist" or a module that "cannot be imported", which names neither the cause nor the fix."""
from __future__ import annotations

import os
import re
from typing import Any

from dagrl.config.checks import require
from dagrl.config.tree import Cfg, leaves

_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
PATH_SUFFIXES = (".path", "_path", "_dir", "_files")


def path_keys() -> list[str]:
    """Every key of conf/ that holds a path or a list of paths (named *.path, *_path, *_dir, *_files)."""
    from dagrl.config.schema import schema
    return [key for key, kind in schema().items()
            if key.endswith(PATH_SUFFIXES) and kind.rstrip("?") in ("str", "paths")]


def check_shell_variables(cfg: Cfg) -> None:
    """No path holds `$NAME` / `${NAME}` (OmegaConf resolves `${...}` itself, so what is left is the shell's). Read
    from a snapshot: this look does not count as the code using the keys (tests prove every key is read by a run)."""
    config = leaves(cfg.snapshot())
    for key in path_keys():
        value = config.get(key)
        for path in value if isinstance(value, list) else [value]:
            found = _VARIABLE.search(path) if isinstance(path, str) else None
            require(found is None, key,
                    f"{key}={path} holds ${found[1] if found else ''}, a shell variable that was not expanded (single "
                    f"quotes, or a config file): write the path out, or use ${{oc.env:{found[1] if found else ''}}}")


def _module_form(spec: str) -> str | None:
    """`dir/graphs.py:build` -> the fix for a function named by a file path; None for module:function."""
    module, colon, function = spec.partition(":")
    if not ("/" in module or "\\" in module or module.endswith(".py")):
        return None
    directory, name = os.path.split(module)
    stem = name[:-3] if name.endswith(".py") else name
    return (f"it takes module:function (a module Python imports), not a file path: put {directory or '.'} on "
            f"PYTHONPATH and write {stem}:{function or '<function>'}")


def check_code_paths(cfg: Cfg) -> None:
    """User functions named the way dagrl loads them."""
    spec = cfg.dag.custom_pipeline_fn
    fix = _module_form(spec) if isinstance(spec, str) else None
    require(fix is None, "dag.custom_pipeline_fn", f"dag.custom_pipeline_fn={spec}: {fix}")
    nodes: Any = cfg.dag.nodes
    for index, node in enumerate(nodes if isinstance(nodes, list) else []):
        fn = node.get("fn") if isinstance(node, dict) else None
        fix = _module_form(fn) if isinstance(fn, str) else None
        require(fix is None, f"dag.nodes.{index}.fn", f"dag.nodes.{index}.fn={fn}: {fix}")
    custom = cfg.custom_reward_function
    path = custom.path
    if isinstance(path, str) and ":" in path and not os.path.exists(os.path.expanduser(path)):
        file, _, name = path.rpartition(":")
        require(not os.path.isfile(os.path.expanduser(file)), "custom_reward_function.path",
                f"custom_reward_function.path={path} names the function too: the path is the file alone and the "
                f"function goes in its own key: custom_reward_function.path={file} custom_reward_function.name={name}")
