"""How a config key is declared: one `key(default, doc, range, choices=...)` field, typed by its annotation, in the
dataclass of the section that owns it (dagrl/config/schema/<group>.py). conf/<group>/default.yaml is written from
these declarations (scripts/gen_config_reference.py), so the YAML a user reads and the schema pre-flight checks
cannot disagree; `keys()` flattens them to {dotted key: Key}.

Annotations: bool, int, float, str, list, dict (a free-form map: `+map.key=value` adds to it), `T | None` (null
allowed), and the path kinds below, which dagrl/config/path_values.py checks by what the path must name."""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Iterator, Union

from dagrl.config.tree import Cfg, mark_subtree_read, record_read


@dataclass(frozen=True)
class Range:
    ok: Callable[[Any], bool]
    text: str  # appended to the type's noun ("an integer" + " >= 0"); a leading "=" replaces the noun
    hint: str = ""  # why, or what the special values mean: appended in parentheses


def hinted(bound: Range, hint: str) -> Range:
    return Range(bound.ok, bound.text, hint)


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def _ints_from(low: int) -> Callable[[Any], bool]:
    """A non-empty list of integers >= low."""
    return lambda v: len(v) > 0 and all(isinstance(i, int) and not isinstance(i, bool) and i >= low for i in v)


POSITIVE_INT = Range(lambda v: v >= 1, ">= 1")
NON_NEGATIVE_INT = Range(lambda v: v >= 0, ">= 0")
ANY_INT = Range(lambda v: True, "")
FINITE = Range(_finite, "=a number")
NON_NEGATIVE = Range(lambda v: _finite(v) and v >= 0, ">= 0")
POSITIVE = Range(lambda v: _finite(v) and v > 0, "> 0")
ABOVE_ONE = Range(lambda v: _finite(v) and v > 1, "> 1")
AT_LEAST_ONE = Range(lambda v: _finite(v) and v >= 1, ">= 1")
UNIT = Range(lambda v: _finite(v) and 0 <= v <= 1, "in [0, 1]")
OPEN_UNIT = Range(lambda v: _finite(v) and 0 < v < 1, "in (0, 1)")
TOP_P = Range(lambda v: _finite(v) and 0 < v <= 1, "in (0, 1]")
TOP_K = Range(lambda v: v == -1 or v >= 1, "=-1 (off) or an integer >= 1")
EVERY_N = Range(lambda v: v == -1 or v >= 1, "=-1 or an integer >= 1")  # every N steps; -1 = never
TIS_CAP = Range(lambda v: _finite(v) and (v <= 0 or v >= 1), "=-1 (off) or a cap >= 1")
LEARNING_RATE = Range(
    lambda v: _finite(v) and 0 < v <= 1, "> 0 and <= 1", "a peak learning rate, e.g. 1e-6; at 0 nothing would train"
)
LOG_PROB_FLOOR = Range(lambda v: _finite(v) and v < 0, "< 0", "a log-prob floor, e.g. -10; null for none")
BETAS = Range(
    lambda v: len(v) == 2 and all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in v),
    "=two numbers in [0, 1)",
)
STEP_LIST = Range(_ints_from(1), "=a non-empty list of positive integers (global steps), e.g. [2,3]")
RANK_LIST = Range(_ints_from(0), "=a non-empty list of integers >= 0 (global ranks), e.g. [0]")

# Strings that name a path, by what must be there: an existing file, one or a list of them, an existing directory,
# a local HF model directory, a directory the run writes (created when missing). Paths: a string or a list of them.
File = Annotated[str, "file"]
Files = Annotated[Union[str, list], "files"]
Dir = Annotated[str, "dir"]
ModelDir = Annotated[str, "model"]
OutDir = Annotated[str, "outdir"]
Paths = Annotated[Union[str, list], "paths"]
Graph = Annotated[Union[dict, list], "graph"]  # nodes: a map by id (conf/dag/), or a list of node dicts
Switches = Annotated[dict, "switches"]  # dag.switches: name -> {key, on, nodes} (dagrl/dag/switches.py)

NOUNS = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "paths": "a string or a list of strings",
    "list": "a list",
    "dict": "a map (key: value)",
    "file": "a file path",
    "files": "a file path or a list of them",
    "dir": "a directory path",
    "model": "a model directory path",
    "outdir": "a directory path",
    "graph": "a map of node id to node (role, fn, deps), or a list of node dicts",
    "switches": "a map of switch name to {key, on, nodes}",
}
PATH_KINDS = ("file", "files", "dir", "model", "outdir")  # strings (files: or lists of strings) naming a path


@dataclass(frozen=True)
class Key:
    """One declared key: `kind` is the checker's type name ("int", "float?", "files", ...)."""

    path: str
    kind: str
    default: Any
    doc: str
    range: Range | None = None
    choices: Any = None  # a tuple, or a registry's live view of its names (dagrl/algo/registry.py)


def key(default: Any, doc: str, bound: Range | None = None, *, choices: Any = None) -> Any:
    """A key's default, its one-line doc (the YAML comment and the reference's row), its range and its choices."""
    meta = {"doc": doc, "range": bound, "choices": choices}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def section(cls: type, doc: str) -> Any:
    """A nested section (its keys are declared by `cls`), with the one line that says what it is."""
    return dataclasses.field(default_factory=cls, metadata={"doc": doc})


class Section:
    """Base of every declared section. An instance built by `build` is the run's config, typed: `cfg.algorithm.gamma`
    is a float an editor and a type checker know, and it reads as a `Cfg` does (`[]`, `get`, `in`, `to_dict`; a
    free-form map comes back as a `Cfg`), recording each key read in tree.READ_KEYS for the dead-key test."""

    _path = ""

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        if name.startswith("_") or name not in type(self).__dataclass_fields__:
            return value
        path = f"{object.__getattribute__(self, '_path')}.{name}".lstrip(".")
        record_read(path)
        return Cfg(value, path) if isinstance(value, dict) else value

    def __getitem__(self, name: str) -> Any:
        if name not in type(self).__dataclass_fields__:
            raise KeyError(f"no config key {f'{self._path}.{name}'.lstrip('.')!r}")
        return getattr(self, name)

    def __contains__(self, name: str) -> bool:
        return name in type(self).__dataclass_fields__

    def __iter__(self) -> Iterator[str]:
        return iter(type(self).__dataclass_fields__)

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default

    def snapshot(self) -> dict[str, Any]:
        """A deep copy as plain data that does not count as reading it."""
        values = {name: object.__getattribute__(self, name) for name in type(self).__dataclass_fields__}
        return {
            name: value.snapshot() if isinstance(value, Section) else copy.deepcopy(value)
            for name, value in values.items()
        }

    def to_dict(self) -> dict[str, Any]:
        """A deep copy as plain data; counts as reading the whole subtree."""
        data = self.snapshot()
        mark_subtree_read(data, self._path)
        return data


def build(cls: type, data: dict[str, Any], path: str = "") -> Any:
    """The typed section `cls` holding `data` (a composed, resolved config's section; every declared key present)."""
    hints = _hints(cls)
    undeclared = [name for name in data if name not in cls.__dataclass_fields__]
    if undeclared:
        raise KeyError(f"config key {f'{path}.{undeclared[0]}'.lstrip('.')!r} is not declared in dagrl/config/schema/")
    values = {
        name: build(hints[name], data[name], f"{path}.{name}".lstrip("."))
        if is_section(hints[name])
        else copy.deepcopy(data[name])
        for name in cls.__dataclass_fields__
    }
    instance = cls(**values)
    object.__setattr__(instance, "_path", path)
    return instance


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


_SCALARS = {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict"}


def kind_of(annotation: Any) -> str:
    """The checker's type name of an annotation: `int | None` -> "int?", `Files` -> "files"."""
    if typing.get_origin(annotation) is Annotated:
        return typing.get_args(annotation)[1]
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(args) < len(typing.get_args(annotation)):
            return kind_of(args[0]) + "?"
    base = typing.get_origin(annotation) or annotation
    if base not in _SCALARS:
        raise TypeError(f"a config key cannot be declared as {annotation!r}")
    return _SCALARS[base]


def is_section(annotation: Any) -> bool:
    return dataclasses.is_dataclass(annotation)


def keys_of(cls: type, prefix: str) -> dict[str, Key]:
    """{dotted key: Key} of a section and its nested sections, in declaration order."""
    hints = _hints(cls)
    found: dict[str, Key] = {}
    for field in dataclasses.fields(cls):
        path, annotation = f"{prefix}.{field.name}", hints[field.name]
        if is_section(annotation):
            found.update(keys_of(annotation, path))
            continue
        default = field.default_factory() if field.default is dataclasses.MISSING else field.default
        found[path] = Key(
            path,
            kind_of(annotation),
            default,
            field.metadata["doc"],
            field.metadata["range"],
            field.metadata["choices"],
        )
    return found


def section_docs(cls: type, prefix: str) -> dict[str, str]:
    """{dotted section: its one-line doc} of the nested sections (the YAML comment on a section's line)."""
    hints = _hints(cls)
    found: dict[str, str] = {}
    for field in dataclasses.fields(cls):
        if is_section(hints[field.name]):
            found[f"{prefix}.{field.name}"] = field.metadata["doc"]
            found.update(section_docs(hints[field.name], f"{prefix}.{field.name}"))
    return found
