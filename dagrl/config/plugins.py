"""trainer.plugins: the user's modules that register algorithm parts (dagrl/algo/catalog.py's registries) and rollout
engines (dagrl/engine/rollout/registry.py), imported by pre-flight itself, so every process that checks the names
knows them first: the CLI's, each torchrun rank's and each Ray worker's (which start from dagrl's own entry point,
not the user's launcher script)."""

from __future__ import annotations

import importlib
import re

from dagrl.config.errors import ConfigError, require
from dagrl.config.tree import Cfg

KEY = "trainer.plugins"
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def import_plugins(cfg: Cfg) -> None:
    """Import each module of trainer.plugins, in order; a name that is no module path or a module that fails to
    import is one line naming it."""
    plugins = cfg.trainer.plugins
    if not isinstance(plugins, list):  # the schema's line names it
        return
    for name in plugins:
        stem = name.rsplit("/", 1)[-1].removesuffix(".py") if isinstance(name, str) else "my_algos"
        require(
            isinstance(name, str) and _MODULE.match(name) is not None and not name.endswith(".py"),
            KEY,
            f"{KEY}: {name!r} is not a module name: write the module as Python imports it, e.g. "
            f"{KEY}=[{stem if _MODULE.match(stem) else 'my_algos'}] for {stem}.py in the working directory or "
            f"on PYTHONPATH",
        )
        try:
            importlib.import_module(name)
        except Exception as error:  # the user's module: its failure, in one line, before any model is built
            text = str(error).strip().splitlines()
            raise ConfigError(
                KEY,
                f"{KEY}: importing {name!r} failed ({type(error).__name__}: "
                f"{text[0] if text else ''}); it must be importable from the working directory or "
                f"PYTHONPATH in every process",
            ) from None
