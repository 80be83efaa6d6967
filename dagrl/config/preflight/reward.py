"""Pre-flight of reward_model.* and custom_reward_function.*, and of the built-in scorers against the data.

Without custom_reward_function.path each row is scored by the scorer its data_source names
(dagrl.reward.scorers.SCORER_BY_DATA_SOURCE). Two mistakes there score every response 0 without an error the run
would stop on: a ground truth the scorer cannot compare with an answer (the arithmetic scorer's int("seven") raises,
and on_error=zero makes that 0; gsm8k's "seven" never equals a number), and a reward_kwargs key the scorer does not
take (a TypeError on every sample). Both are found from the data_source and reward_model columns and the scorers'
source (read with ast: dagrl.reward.scorers.math imports math-verify and sympy). A custom function's source is
read the same way for the extra_info keys it indexes, never called: calling a user's scorer here could load a judge
model, change directory or spend its first call before the run.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import textwrap
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Callable

from dagrl.config.checks import as_list
from dagrl.config.errors import ConfigError, require
from dagrl.config.tree import Cfg


def check_overlong_buffer(cfg: Cfg, response_length: int) -> None:
    buffer = cfg.reward_model.overlong_buffer
    require(
        not buffer.enable or 0 < buffer.len < response_length,
        "reward_model.overlong_buffer.len",
        f"reward_model.overlong_buffer.len={buffer.len} must be in 1..{response_length - 1} when enabled",
    )


def check_overlong_manager(cfg: Cfg) -> None:
    """The overlong-buffer penalty is the dapo reward manager's: with naive it would silently not apply."""
    reward = cfg.reward_model
    require(
        not reward.overlong_buffer.enable or reward.reward_manager == "dapo",
        "reward_model.overlong_buffer.enable",
        f"reward_model.overlong_buffer.enable=true has no effect with reward_model.reward_manager="
        f"{reward.reward_manager} (the penalty is the dapo manager's): set reward_model.reward_manager=dapo, or "
        f"drop overlong_buffer.enable",
    )


def check_async_reward(cfg: Cfg) -> None:
    """Scoring in the background happens behind the reshard node, where dynamic sampling no longer sees the scores."""
    require(
        not (cfg.reward_model.launch_reward_fn_async and cfg.algorithm.filter_groups.enable),
        "reward_model.launch_reward_fn_async",
        "reward_model.launch_reward_fn_async=true scores behind the reshard node, beside the log-prob passes, but "
        "dynamic sampling (algorithm.filter_groups.enable=true) filters on the scores before it: set one of them "
        "false",
    )


def check_reward_name_without_path(cfg: Cfg) -> None:
    """A function name without a file would be ignored: the built-in scorers would score the run."""
    custom = cfg.custom_reward_function
    require(
        custom.path is not None or custom.name in (None, "compute_score"),
        "custom_reward_function.name",
        f"custom_reward_function.name={custom.name} has no effect without custom_reward_function.path (the "
        f"built-in scorers would score the run): set custom_reward_function.path to the file defining "
        f"{custom.name}, or drop the name",
    )


def _integer(text: str) -> bool:
    try:
        int(text.strip())
    except ValueError:
        return False
    return True


def _decimal(text: str) -> bool:
    try:
        Decimal(text.replace(",", "").replace("$", "").replace(" ", "").strip().rstrip("."))
    except InvalidOperation:
        return False
    return True


# scorer module -> (what its ground truth must be, the test); math (math-verify) parses LaTeX: not checked here
GROUND_TRUTH_FORMATS: dict[str, tuple[str, Callable[[str], bool]]] = {
    "arithmetic": ("an integer, e.g. '7'", _integer),
    "last_number": ("an integer, e.g. '281764' or '281,764'", lambda text: _integer(text.replace(",", ""))),
    "gsm8k": ("a number, e.g. '72' or '1,080.5'", _decimal),
}


def scorer_parameters(module: str) -> tuple[list[str], bool] | None:
    """(parameter names, takes **kwargs) of dagrl.reward.scorers.<module>.compute_score, read from its source."""
    spec = importlib.util.find_spec(f"dagrl.reward.scorers.{module}")
    try:
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    except (AttributeError, OSError, SyntaxError, TypeError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "compute_score":
            args = node.args
            return [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]], args.kwarg is not None
    return None


def _rows(path: str):
    """(row, data_source, ground_truth) of a data file, from those two columns only."""
    from dagrl.data.parquet_file import open_parquet

    parquet, offset = open_parquet(path), 0
    for batch in parquet.iter_batches(batch_size=65536, columns=["data_source", "reward_model"]):
        sources = batch.column(0).to_pylist()
        truths = [(m or {}).get("ground_truth") if isinstance(m, dict) else None for m in batch.column(1).to_pylist()]
        for index, (source, truth) in enumerate(zip(sources, truths)):
            yield offset + index, source, truth
        offset += batch.num_rows


def check_builtin_scorers(cfg: Cfg) -> None:
    """Each data file's rows fit the built-in scorer their data_source picks (nothing to check with a custom
    reward function, which decides what it takes)."""
    if cfg.custom_reward_function.path:
        return
    from dagrl.reward.scorers import SCORER_BY_DATA_SOURCE

    reward_kwargs = cfg.custom_reward_function.reward_kwargs
    reward_kwargs = reward_kwargs.to_dict() if hasattr(reward_kwargs, "to_dict") else dict(reward_kwargs or {})
    for key in ("data.train_files", "data.val_files"):
        files = cfg.data.train_files if key == "data.train_files" else cfg.data.val_files
        for path in as_list(files) if files else []:
            checked: set[Any] = set()
            for row, source, truth in _rows(os.path.expanduser(path)):
                if source not in SCORER_BY_DATA_SOURCE:
                    continue  # data.checks.check_reward_inputs names a source without a scorer
                module = SCORER_BY_DATA_SOURCE[source][0]
                if source not in checked:
                    checked.add(source)
                    _check_kwargs(source, module, reward_kwargs)
                fmt = GROUND_TRUTH_FORMATS.get(module)
                if fmt is not None and truth is not None and not fmt[1](str(truth)):
                    require(
                        False,
                        key,
                        f"data file {path!r} row {row} has reward_model.ground_truth {truth!r}, but the built-in "
                        f"scorer of data_source {source!r} (dagrl.reward.scorers.{module}) needs {fmt[0]}: every "
                        f"response of such a row would score 0; fix the file, or set custom_reward_function.path "
                        f"to a scorer that takes this answer",
                    )


def _check_kwargs(source: str, module: str, reward_kwargs: dict[str, Any]) -> None:
    found = scorer_parameters(module)
    if not reward_kwargs or found is None:
        return
    names, takes_any = found
    unknown = sorted(name for name in reward_kwargs if name not in names)
    require(
        takes_any or not unknown,
        "custom_reward_function.reward_kwargs",
        f"custom_reward_function.reward_kwargs has {', '.join(unknown)}, but the built-in scorer of data_source "
        f"{source!r} (dagrl.reward.scorers.{module}.compute_score({', '.join(names)})) takes no such argument, so "
        "every response would fail to score: drop "
        f"+custom_reward_function.reward_kwargs.{unknown[0] if unknown else ''}, "
        f"or set custom_reward_function.path to your own scorer",
    )


def _function_node(function: Callable) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, int] | None:
    """The syntax tree of `function`'s own source and its first line in the file; None when there is none to read."""
    try:
        lines, first = inspect.getsourcelines(function)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):  # a builtin, a lambda in an expression, a callable object
        return None
    node = tree.body[0] if tree.body else None
    return (node, first) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def extra_info_reads(function: Callable) -> list[tuple[str, int]]:
    """(key, line) of each `extra_info["key"]` read in `function`'s own source, its extra_info being the fourth
    parameter (the trainer passes it fourth); [] when the source cannot be read. `.get("key")` reads are not listed:
    they tolerate a missing key."""
    found = _function_node(function)
    if found is None:
        return []
    node, first = found
    params = [a.arg for a in [*node.args.posonlyargs, *node.args.args]]
    if len(params) < 4:
        return []
    return [
        (sub.slice.value, first + sub.lineno - 1)
        for sub in ast.walk(node)
        if isinstance(sub, ast.Subscript)
        and isinstance(sub.ctx, ast.Load)
        and isinstance(sub.value, ast.Name)
        and sub.value.id == params[3]
        and isinstance(sub.slice, ast.Constant)
        and isinstance(sub.slice.value, str)
    ]


def check_extra_info_reads(cfg: Cfg, function: Callable, files: list[str]) -> None:
    """A custom reward function that indexes extra_info with a key no data file's extra_info has raises KeyError on
    every response (each row's extra_info is its struct, every field present; {} without the column): scored 0 under
    reward_model.on_error=zero until the first step stops the run, after the models are built. Multi-turn runs add
    the agent loop's keys (dagrl/agent/trajectory.py): not checked there."""
    import pyarrow as pa

    from dagrl.data.parquet_file import open_parquet

    reads = extra_info_reads(function)
    if not reads or cfg.actor_rollout_ref.rollout.multi_turn.enable:
        return
    keys: set[str] = set()
    for path in files:
        schema = open_parquet(path).schema_arrow
        kind = schema.field("extra_info").type if "extra_info" in schema.names else pa.null()
        if pa.types.is_struct(kind):
            keys.update(kind.field(i).name for i in range(kind.num_fields))
        elif not pa.types.is_null(kind):  # refused by the data checks; nothing to compare with here
            return
    missing = [(key, line) for key, line in reads if key not in keys]
    if not missing:
        return
    key, line = missing[0]
    custom = cfg.custom_reward_function
    path = os.path.abspath(os.path.expanduser(custom.path))
    has = f"their extra_info keys are {sorted(keys)}" if keys else "they have no extra_info column"
    raise ConfigError(
        "custom_reward_function.path",
        f"custom reward function {custom.name} in {path!r} reads extra_info[{key!r}] (line {line}), but no data "
        f"file has it ({has}; {', '.join(repr(f) for f in files)}): every response would raise KeyError and score "
        f"0; fix the key, add it to the data files' extra_info, or read it with extra_info.get({key!r})",
    )


EXITS = {"exit", "_exit", "abort", "quit"}


def _ends(body: list[ast.stmt]) -> bool:
    """Whether running `body` cannot go past its last statement (it returns or raises on every path). A `for` loop
    may finish; a `while`, a `match` and other forms count as ending, so only a body that plainly falls off its end
    is reported."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, ast.If):
        return _ends(last.body) and _ends(last.orelse)
    if isinstance(last, (ast.With, ast.AsyncWith)):
        return _ends(last.body)
    if isinstance(last, ast.Try):
        normal = _ends(last.body) or _ends(last.orelse)
        return _ends(last.finalbody) or (normal and all(_ends(handler.body) for handler in last.handlers))
    if isinstance(last, (ast.For, ast.AsyncFor)):
        return False  # its iterations may all finish without returning
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):  # sys.exit(...): the run's own line says so
        func = last.value.func
        return (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) in EXITS
    return not isinstance(last, (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Pass, ast.Delete))


def _text(value: ast.expr) -> bool:
    """Whether a returned expression is a string literal, an f-string, or a conditional with one on a side."""
    if isinstance(value, ast.IfExp):
        return _text(value.body) or _text(value.orelse)
    return isinstance(value, ast.JoinedStr) or (isinstance(value, ast.Constant) and isinstance(value.value, str))


def _literal_keys(value: ast.AST) -> list[str] | None:
    """The keys of a dict written out in a return (`{'acc': x}`, `dict(acc=x)`); None when they are not all known
    (a `**other`, a computed key, or no dict literal)."""
    if isinstance(value, ast.Dict):
        known = all(isinstance(key, ast.Constant) and isinstance(key.value, str) for key in value.keys)
        return [key.value for key in value.keys] if known else None
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "dict" and not value.args:
        names = [keyword.arg for keyword in value.keywords]
        return names if None not in names else None
    return None


def non_score_return(function: Callable) -> tuple[str, str] | None:
    """(where, how to fix it) when `function` (a scorer) returns something that is no score: None from a bare
    `return` / `return None` or from a body that can fall off its end, a string (`return "1.0"`), or a dict written
    out without a 'score' key (`return {"acc": 1.0}`); None when
    nothing such is seen or the source cannot be read (a wrapped, generator or callable-object scorer is not
    judged)."""
    found = _function_node(function)
    if found is None or hasattr(function, "__wrapped__"):
        return None
    node, first = found
    own: list[ast.AST] = []  # the function's own nodes, not those of functions or lambdas defined inside it
    stack: list[ast.AST] = list(node.body)
    while stack:
        sub = stack.pop()
        own.append(sub)
        if not isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(sub))
    if any(isinstance(sub, (ast.Yield, ast.YieldFrom)) for sub in own):
        return None
    returns = sorted((sub for sub in own if isinstance(sub, ast.Return)), key=lambda sub: sub.lineno)
    end_with_zero = "e.g. end it with `return 0.0`"
    for sub in returns:
        line, value = first + sub.lineno - 1, sub.value
        if value is None or (isinstance(value, ast.Constant) and value.value is None):
            return f"returns None at line {line} (a path with no `return <score>`)", end_with_zero
        if _text(value):
            return f"returns a str at line {line} (text such as '1.0' is no number)", "e.g. return 1.0, not '1.0'"
        keys = _literal_keys(value)
        if keys is not None and "score" not in keys:
            shown = ", ".join(repr(key) for key in keys)
            return (
                f"returns a dict without a 'score' key at line {line} (keys {shown}; the trainer reads 'score')",
                f"e.g. return {{'score': ..., {shown}: ...}}" if len(keys) == 1 else "e.g. add 'score': <float>",
            )
    if _ends(node.body):
        return None
    last = first + (node.body[-1].end_lineno or node.body[-1].lineno) - 1
    return f"can run past its last line ({last}) and return None (a path with no `return <score>`)", end_with_zero


def check_score_returns(cfg: Cfg, function: Callable) -> None:
    """A custom scorer that returns None on some path (an `if` without its `else: return 0.0`), or a string, fails
    on every response that takes that path: each scores 0 under reward_model.on_error=zero, and a step where all
    fail stops the run, after the models are built. Read from its source, never called."""
    found = non_score_return(function)
    if found is None:
        return
    where, fix = found
    custom = cfg.custom_reward_function
    path = os.path.abspath(os.path.expanduser(custom.path))
    raise ConfigError(
        "custom_reward_function.path",
        f"custom reward function {custom.name} in {path!r} {where}: that is not a score, so every response taking "
        f"that path would fail and score 0; return a float (or a dict with a 'score' key) on every path, {fix}",
    )
