"""Pre-flight of every path-valued key, by the kind of path the schema gives it (its annotation in dagrl/config/schema/:
file, files, dir, model, outdir), before anything opens the path: one checker for all such keys, so a new path key
is covered by its type alone. It catches what a specific check would only call "does not exist": a shell variable
the shell did not expand (`$DATA/train.parquet` in single quotes), a space at either end (a quoted value), a URL
(`s3://`, `hdfs://`: dagrl reads and writes local paths), a hub id given as a model directory; and, for the
directories a run writes, that they can be created and written now rather than at the first save, dump or log.
Also user code named by a file path where dagrl imports a module (`dag.custom_pipeline_fn=graphs.py:build`) or with
the function name glued on (`custom_reward_function.path=reward.py:compute_score`)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from dagrl.config.errors import require
from dagrl.config.errors import ConfigError
from dagrl.config.tree import Cfg, leaves

_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def path_keys() -> dict[str, str]:
    """{key: kind} of every key of conf/ that holds a path or a list of paths (kind without the '?')."""
    from dagrl.config.schema.check import PATH_KINDS, schema

    return {key: kind.rstrip("?") for key, kind in schema().items() if kind.rstrip("?") in PATH_KINDS}


def check_path_values(cfg: Cfg, problems) -> None:
    """Each path key on its own (one line per bad key, `problems` an errors.Problems). Read from a snapshot: this
    look does not count as the code using the keys (tests prove every key is read by a run). The run's output
    directories are checked shortest first, and one inside a directory already refused is not named again (the
    profiler's default save_path lies under trainer.default_local_dir)."""
    config = leaves(cfg.snapshot())
    refused: list[str] = []
    keys = sorted(path_keys().items(), key=lambda item: (item[1] == "outdir", len(str(config.get(item[0])))))
    for key, kind in keys:
        value = config.get(key)
        paths = [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, str) and v]
        if any(path.startswith(root.rstrip("/") + "/") for path in paths for root in refused):
            continue
        before = len(problems.errors)
        problems.run(check_path, key, kind, paths)
        if len(problems.errors) > before:
            refused += paths


def check_path(key: str, kind: str, paths: list[str]) -> None:
    for path in paths:
        if kind == "outdir":  # (its text is checked there too)
            check_writable_dir(key, path)
            continue
        _check_text(key, kind, path)
        if os.path.exists(os.path.expanduser(path)):
            continue
        _check_pattern(key, kind, path)
        if kind == "model" and not os.path.isabs(path) and _HUB_ID.fullmatch(path) and not path.startswith("."):
            name = path.rsplit("/", 1)[1]
            raise ConfigError(
                key,
                f"{key}={path} does not exist here and looks like a Hugging Face hub id; dagrl "
                f"reads a local model directory (nothing is downloaded at run time): download it "
                f"first, e.g. "
                f"huggingface-cli download {path} --local-dir ~/models/{name}, then set "
                f"{key}=~/models/{name}",
            )


def _check_pattern(key: str, kind: str, path: str) -> None:
    """A shell pattern (`shards/*.parquet`) that reached dagrl unexpanded (quoted, or from a script's variable):
    dagrl opens paths as written and does not glob."""
    if not any(char in path for char in "*?["):
        return
    import glob

    found = sorted(glob.glob(os.path.expanduser(path)))
    listed = f"[{','.join(found[:3])}{',...' if len(found) > 3 else ''}]" if found else "[<file>,<file>]"
    what = f"it matches {len(found)} file(s) now" if found else "it matches nothing now"
    fix = f"list the files: {key}={listed}" if kind == "files" else f"name one path: {key}=<path>"
    raise ConfigError(key, f"{key}={path} is a shell pattern, which dagrl does not expand ({what}): {fix}")


def _check_text(key: str, kind: str, path: str) -> None:
    """What the path's text alone shows: an unexpanded shell variable, a space at an end, a URL."""
    found = _VARIABLE.search(path)
    require(
        found is None,
        key,
        f"{key}={path} holds ${found[1] if found else ''}, a shell variable that was not expanded (single "
        f"quotes, or a config file): write the path out, or use ${{oc.env:{found[1] if found else ''}}}",
    )
    if path != path.strip():
        where = "leading" if path[0].isspace() else "trailing"
        raise ConfigError(
            key,
            f"{key}={path!r} has a {where} space (inside the quotes?), which is part of the path: "
            f"write {key}={path.strip()}",
        )
    url = _URL.match(path)
    if url:
        how = (
            "write to a local or mounted directory and copy the results there afterwards"
            if kind == "outdir"
            else "copy it to local disk (or a mounted file system) first and give that path"
        )
        raise ConfigError(
            key, f"{key}={path} is a URL ({url[1]}://), but dagrl reads and writes local paths only: {how}"
        )


def check_writable_dir(key: str, configured: str, what: str | None = None) -> Path:
    """The directory `configured` (config key `key`) exists and can be written, or can be created: its nearest
    existing parent is a writable directory in which a directory can be made (tried: /proc, a read-only mount or a
    full quota pass os.access as root). Returns it, user-expanded. `what`: how the message names it."""
    import errno
    import tempfile

    name = what or f"{key}="
    sep = "" if name.endswith("=") else " "
    _check_text(key, "outdir", configured)
    root = Path(os.path.expanduser(configured))
    # a symlink that resolves to nothing (its target gone, or a loop) does not "exist", but cannot be created either
    dangling = next((p for p in [root, *root.parents] if p.is_symlink() and not p.exists()), None)
    require(
        dangling is None,
        key,
        f"{name}{sep}{root} cannot be created: {dangling} is a symlink that leads nowhere "
        f"({'a loop' if dangling is not None and _loops(dangling) else 'its target is gone'}); "
        f"fix the link or {key}",
    )
    existing = next((p for p in [root, *root.parents] if p.exists()), None)
    require(
        existing is None or existing.is_dir(),
        key,
        f"{name}{sep}{root} cannot be created: {existing} is not a directory; fix {key}",
    )
    require(
        existing is not None and os.access(existing, os.W_OK),
        key,
        f"{name}{sep}{root} is not writable (nearest existing parent: {existing}): fix {key}",
    )
    if existing != root:  # to be created: try it where it would be (the probe is removed at once)
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".dagrl_probe_", dir=existing))
        except OSError as error:
            reason = error.strerror or errno.errorcode.get(error.errno or 0, str(error))
            raise ConfigError(
                key, f"{name}{sep}{root} is not writable: no directory can be made in {existing} ({reason}); fix {key}"
            ) from None
    return root


def _loops(link: Path) -> bool:
    import errno

    try:
        link.resolve(strict=True)
    except RuntimeError:  # Python < 3.13: a symlink loop
        return True
    except OSError as error:
        return error.errno == errno.ELOOP
    return False


def _module_form(spec: str) -> str | None:
    """`dir/graphs.py:build` -> the fix for a function named by a file path; None for module:function."""
    module, colon, function = spec.partition(":")
    if not ("/" in module or "\\" in module or module.endswith(".py")):
        return None
    directory, name = os.path.split(module)
    stem = name[:-3] if name.endswith(".py") else name
    return (
        f"it takes module:function (a module Python imports), not a file path: put {directory or '.'} on "
        f"PYTHONPATH and write {stem}:{function or '<function>'}"
    )


def check_code_paths(cfg: Cfg) -> None:
    """User functions named the way dagrl loads them."""
    spec = cfg.dag.custom_pipeline_fn
    fix = _module_form(spec) if isinstance(spec, str) else None
    require(fix is None, "dag.custom_pipeline_fn", f"dag.custom_pipeline_fn={spec}: {fix}")
    nodes: Any = cfg.dag.nodes
    named = nodes.to_dict().items() if isinstance(nodes, Cfg) else enumerate(nodes if isinstance(nodes, list) else [])
    for name, node in named:  # a map's nodes by id, a list's by index
        fn = node.get("fn") if isinstance(node, dict) else None
        fix = _module_form(fn) if isinstance(fn, str) else None
        require(fix is None, f"dag.nodes.{name}.fn", f"dag.nodes.{name}.fn={fn}: {fix}")
    custom = cfg.custom_reward_function
    path = custom.path
    if isinstance(path, str) and ":" in path and not os.path.exists(os.path.expanduser(path)):
        file, _, name = path.rpartition(":")
        require(
            not os.path.isfile(os.path.expanduser(file)),
            "custom_reward_function.path",
            f"custom_reward_function.path={path} names the function too: the path is the file alone and the "
            f"function goes in its own key: custom_reward_function.path={file} custom_reward_function.name={name}",
        )
