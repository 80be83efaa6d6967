"""The fix that an override's error line suggests, where the obvious one would mislead: Hydra refuses or misreads
what a hurried user types (`clip_ratio=0,2` is a sweep, `betas=(0.9,0.999)` does not parse), and "quote the value"
would only turn a number into a string the type check then refuses. config/load.py calls these."""
from __future__ import annotations

import re
from typing import Any


def _kind(key: str) -> str:
    from dagrl.config.schema import schema
    return schema().get(key, "").rstrip("?")


def sweep_fix(key: str, value: str, default: Any) -> str:
    """Hydra reads `key=a,b` as a sweep (one run per value): a verl user meant a list, a number written with a
    decimal comma or a thousands separator, or a string with commas."""
    kind = _kind(key)
    if isinstance(default, list) or kind == "paths":  # a path, or a list of paths
        return f"a list needs brackets: {key}='[{value}]'"
    if kind in ("int", "float") and re.fullmatch(r"-?\d+(,\d+)+", value):
        first, *rest = value.split(",")
        if kind == "float" and len(rest) == 1:
            return f"a number takes a decimal point, not a comma: write {key}={first}.{rest[0]}"
        if all(len(part) == 3 for part in rest):
            return f"a number takes no thousands separator: write {key}={first}{''.join(rest)}"
        return f"a number takes no commas: write {key}=<number> (a decimal point for a fraction)"
    return f"a value with commas needs quotes: \"{key}='{value}'\" (unquoted, Hydra reads it as a sweep)"


def parse_fix(key: str, value: str) -> str | None:
    """The fix for a value Hydra's grammar refused, where quoting it would not help; None: no such case."""
    if value.startswith("="):  # key==value
        return f"one '=' goes between key and value: {key}={value.lstrip('=')}"
    if value.startswith("(") and value.endswith(")"):  # a Python tuple
        return f"a list is written in brackets: {key}=[{value[1:-1]}]"
    return None


def stray_word(before: str | None, arg: str) -> str | None:
    """`arg` (no '=') right after a complete `key=value`, and no config key itself: the shell split a value at a
    space (`trainer.logger=console tensorboard`). The message, or None when that is not what happened."""
    if not before or "=" not in before or before.endswith("=") or arg.startswith(("~", "-")):
        return None
    from dagrl.config.schema import default_config
    # a key written without its value (`trainer.total_epochs`, YAML's `data.train_batch_size:`, a misspelt
    # `trainer.totl_epochs`) starts with a section name: that is not a split value
    if arg.lstrip("+").rstrip(":").split(".")[0] in default_config():
        return None
    key, _, value = before.partition("=")
    bare = key.lstrip("+~")
    if _kind(bare) in ("paths", "list") and not value.startswith("["):
        fix = f"{key}='[{value},{arg}]'"
    else:
        fix = f"\"{key}='{value} {arg}'\" (quoted)"
    return (f"override '{arg}' follows '{before}' and is not key=value: the shell splits a value at a space; "
            f"write {fix}")
