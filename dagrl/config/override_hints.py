"""The fix that an override's error line suggests, where the obvious one would mislead: Hydra refuses or misreads
what a hurried user types (`clip_ratio=0,2` is a sweep, `betas=(0.9,0.999)` does not parse), and "quote the value"
would only turn a number into a string the type check then refuses; and the line for an override Hydra's grammar
refuses. config/load.py calls these."""

from __future__ import annotations

import re
from typing import Any

from dagrl.config.errors import ConfigError
from dagrl.config.schema.check import LOOKALIKES, MISSING, default_config, default_value, schema


def _kind(key: str) -> str:
    return schema().get(key, "").rstrip("?")


def sweep_fix(key: str, value: str, default: Any) -> str:
    """Hydra reads `key=a,b` as a sweep (one run per value): a verl user meant a list, a number written with a
    decimal comma or a thousands separator, or a string with commas."""
    kind = _kind(key)
    if isinstance(default, list) or kind in ("paths", "files"):  # a path, or a list of paths
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
    quoted_key = re.compile(r"[\"'](\w+)[\"']\s*:\s*")
    if value.startswith("{") and quoted_key.search(value):  # JSON: {"scale": 2}
        plain = quoted_key.sub(r"\1: ", value)
        entries = re.findall(r"[\"'](\w+)[\"']\s*:\s*([^,}]+)", value)
        each = " ".join(f"+{key.lstrip('+~')}.{name}={entry.strip()}" for name, entry in entries)
        return f"Hydra writes a map without quotes around its keys ({plain}); to add entries to it: {each}"
    if value.startswith("(") and value.endswith(")"):  # a Python tuple
        return f"a list is written in brackets: {key}=[{value[1:-1]}]"
    if value.count("${") > value.count("}"):  # ${a.b without its brace: quoting would make it text
        return f"close the interpolation with '}}': {key}={value}}}"
    if value.endswith("]") and "[" not in value:  # a, b] : the opening bracket was lost
        return f"a list opens with '[': {key}=[{value}"
    if _kind(key.lstrip("+~")) in ("int", "float"):  # 1e-6; 8) : a character pasted after the number
        number = re.match(r"-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", value)
        if number and number.group(0) != value:
            return (
                f"{key.lstrip('+~')} takes a number; drop what follows it ({value[number.end() :]!r}): "
                f"{key}={number.group(0)}"
            )
    return None


def stray_word(before: str | None, arg: str) -> str | None:
    """`arg` (no '=') right after a complete `key=value`, and no config key itself: the shell split a value at a
    space (`trainer.logger=console tensorboard`). The message, or None when that is not what happened."""
    if not before or "=" not in before or before.endswith("=") or arg.startswith(("~", "-")):
        return None
    # a key written without its value (`trainer.total_epochs`, YAML's `data.train_batch_size:`, a misspelt
    # `trainer.totl_epochs`) starts with a section name: that is not a split value
    if arg.lstrip("+").rstrip(":").split(".")[0] in default_config():
        return None
    key, _, value = before.partition("=")
    bare = key.lstrip("+~")
    if _kind(bare) in ("paths", "files", "list") and not value.startswith("["):
        fix = f"{key}='[{value},{arg}]'"
    else:
        fix = f"\"{key}='{value} {arg}'\" (quoted)"
    return f"override '{arg}' follows '{before}' and is not key=value: the shell splits a value at a space; write {fix}"


def _ascii_value(value: str) -> str:
    """`value` typed in ASCII: lookalikes replaced, quotes that only wrapped it (“/data/x”) dropped."""
    fixed = "".join(LOOKALIKES.get(char, char) for char in value)
    if len(fixed) >= 2 and fixed[0] == fixed[-1] and fixed[0] in "\"'" and value[0] != fixed[0]:
        fixed = fixed[1:-1]
    return fixed.strip()


def key_fix(key: str, value: str) -> str | None:
    """The fix for an override whose key part Hydra refused: `trainer.=2`, `dag.nodes.-1.fn=...`, Python's
    `trainer.logger+=[wandb]`."""
    bare = key.lstrip("+~")
    if bare.endswith("+"):  # `key+=[...]`: Hydra reads the key `key+`
        name, default = bare[:-1], default_value(bare[:-1])
        items = [str(v) for v in default] if isinstance(default, list) else ["<current items>"]
        added = value.strip("[]")
        return (
            f"Hydra has no '+=' (append): write the whole list, e.g. {name}=[{','.join(items + [added])}]"
            if default is not MISSING
            else f"Hydra has no '+=': write {name}=<value>"
        )
    indexed = re.search(r"(\w)\[(-?\d+)\]", bare)
    if indexed:  # Python's dag.nodes[1].fn: Hydra indexes a list with a dot
        dotted = re.sub(r"\[(-?\d+)\]", r".\1", bare)
        return f"Hydra indexes a list with a dot, not brackets: write {dotted}={value}"
    parts = bare.split(".")
    if "" in parts:
        return (
            f"the key '{bare}' has an empty part (a '.' at its end or doubled): write the whole key, e.g. "
            f"{'.'.join(p for p in parts if p)}.<name>={value}"
        )
    negative = next((p for p in parts if re.fullmatch(r"-\d+", p)), None)
    if negative:
        at = parts.index(negative)
        where, rest = ".".join(parts[:at]), ".".join(["<index>", *parts[at + 1 :]])
        return (
            f"a list index counts from 0 ({where}.0 is the first item); Hydra takes no negative index: write "
            f"{where}.{rest}={value}"
        )
    return None


def value_fix(key: str, value: str) -> str | None:
    """The fix for a value Hydra's grammar refused because of what it holds: a Unicode lookalike of an ASCII
    character, `~user` (another user's home, which the shell expands only at a word's start), `name=v` given to
    a map."""
    odd = next((char for char in value if char in LOOKALIKES), None)
    if odd is not None:
        import unicodedata

        return (
            f"the value holds {odd!r} (U+{ord(odd):04X}, {unicodedata.name(odd, 'a lookalike').lower()}), "
            f"copied from a document: type it in ASCII: {key}={_ascii_value(value)}"
        )
    if value.startswith("~"):
        user, slash, rest = value[1:].partition("/")
        if not user:  # ~/x: this user's home
            return (
                f"the shell did not expand '~' (it does only at the start of a word): write the full path, "
                f"e.g. {key}=$HOME{value[1:]}"
            )
        import os

        home = os.path.expanduser(f"~{user}")
        home = home if home != f"~{user}" else f"/home/{user}"
        return (
            f"the shell did not expand '~{user}' (it does only at the start of a word): write the full path, "
            f"e.g. {key}={home}{slash}{rest}"
        )
    name, equals, entry = value.partition("=")
    if equals and _kind(key.lstrip("+~")) == "dict" and re.fullmatch(r"\w+", name):
        return f"{key.lstrip('+~')} is a map: add one entry with +{key.lstrip('+~')}.{name}={entry}"
    return None


CONFIG_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".toml")


def not_an_override(arg: str) -> str | None:
    """An argument without '=' that is no misspelt override but something else the shell passed on: only
    whitespace (a line-continuation backslash with a space after it), a comment's words, a config file."""
    if not arg.strip():
        return (
            f"the argument {arg!r} is only whitespace: a line-continuation '\\' with a space after it passes the "
            f"space as an argument and ends the command there (the lines after it ran as another command): "
            f"remove the space after the '\\'"
        )
    if arg.startswith("#"):
        return (
            f"'{arg}' starts a comment that reached the command line as arguments (zsh passes '#' words on "
            f"without `setopt interactivecomments`, and a comment inside a '\\'-continued command ends it): "
            f"move the comment out of the command"
        )
    if arg.lower().endswith(CONFIG_FILE_SUFFIXES) and not arg.startswith(("+", "~")):
        return (
            f"'{arg}' is a config file, but python3 -m dagrl.main_dag takes no config file: set its keys as "
            f"key=value overrides (e.g. data.train_batch_size=8; see docs/config_reference.md), or put group "
            f"options in a directory given with --config-dir"
        )
    return None


def parse_error(parser: Any, overrides: list[str], err: Exception) -> ConfigError:
    """Hydra's grammar refused the command line: name the override it refused (each is parsed alone to find it) and
    the likely fix (a trailing comma, a character Hydra reserves such as `~` or `$`: quote the value)."""
    from hydra.errors import OverrideParseException

    reason = str(err).splitlines()[0]
    for arg in overrides:
        try:
            parser.parse_overrides([arg])
        except OverrideParseException as own:
            reason = re.sub(r" expecting \{.*\}", "", str(own).splitlines()[0])  # not the grammar's token list
            key, _, value = arg.partition("=")
            if value.endswith(",") and value.strip(","):
                fix = f"drop the trailing comma: {key}={value.rstrip(',')}"
            elif key_fix(key, value) or value_fix(key, value):  # the key's form, a lookalike character, ~user
                fix = key_fix(key, value) or value_fix(key, value)
            elif parse_fix(key, value):
                fix = parse_fix(key, value)
            elif value[:1] in "[{":
                fix = "close the bracket (a list is written [a,b], a map {a: 1})"
            elif "'" not in value:
                fix = f"quote the value: \"{key}='{value}'\""
            else:
                fix = f"write {key}=<value> with a valid value"
            return ConfigError(key.lstrip("+~"), f"cannot parse the command line: override '{arg}': {reason}; {fix}")
    return ConfigError("overrides", f"cannot parse the command line: {reason}")
