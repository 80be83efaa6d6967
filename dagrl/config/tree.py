"""A read-only config tree that records which keys the code reads.

The trainer converts the composed Hydra config into a `Cfg` once. Every attribute read is recorded in
`READ_KEYS`, so a test can prove that each key in conf/ is used by some code (no dead keys).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Iterator

READ_KEYS: set[str] = set()
_RECORDERS: list[set[str]] = []  # the open `recording()` blocks


@contextlib.contextmanager
def recording() -> Iterator[set[str]]:
    """The keys read inside the block (they still go to READ_KEYS): what a pre-flight check depended on."""
    reads: set[str] = set()
    _RECORDERS.append(reads)
    try:
        yield reads
    finally:
        _RECORDERS.remove(reads)


def record_read(key: str) -> None:
    READ_KEYS.add(key)
    for reads in _RECORDERS:
        reads.add(key)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


class Cfg:
    """Attribute access over a nested dict; records every key read (full dotted path) in READ_KEYS."""

    __slots__ = ("_data", "_path")

    def __init__(self, data: dict[str, Any], path: str = "") -> None:
        object.__setattr__(self, "_data", data)
        object.__setattr__(self, "_path", path)

    def _wrap(self, name: str, value: Any) -> Any:
        full = _join(self._path, name)
        record_read(full)
        return Cfg(value, full) if isinstance(value, dict) else value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name not in self._data:
            raise AttributeError(f"no config key {_join(self._path, name)!r}")
        return self._wrap(name, self._data[name])

    def __getitem__(self, name: str) -> Any:
        if name not in self._data:
            raise KeyError(f"no config key {_join(self._path, name)!r}")
        return self._wrap(name, self._data[name])

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("the config is read-only once the run starts")

    def __contains__(self, name: str) -> bool:
        return name in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self._data else default

    def to_dict(self) -> dict[str, Any]:
        """A deep copy as plain data; counts as reading the whole subtree."""
        mark_subtree_read(self._data, self._path)
        return copy.deepcopy(self._data)

    def snapshot(self) -> dict[str, Any]:
        """A deep copy as plain data that does not count as reading it (what a checkpoint records)."""
        return copy.deepcopy(self._data)

    def __repr__(self) -> str:
        return f"Cfg({self._path or '<root>'}: {self._data!r})"


def mark_subtree_read(data: Any, path: str) -> None:
    if path:
        record_read(path)
    if isinstance(data, dict):
        for key, value in data.items():
            mark_subtree_read(value, _join(path, key))


def leaf_keys(data: dict[str, Any], path: str = "") -> list[str]:
    """Dotted paths of every leaf; an empty dict (a free-form map) counts as a leaf."""
    keys: list[str] = []
    for key, value in data.items():
        full = _join(path, key)
        if isinstance(value, dict) and value:
            keys.extend(leaf_keys(value, full))
        else:
            keys.append(full)
    return keys


def leaves(data: dict[str, Any], path: str = "") -> dict[str, Any]:
    """{dotted path: value} of every leaf, in leaf_keys' order."""
    found: dict[str, Any] = {}
    for key, value in data.items():
        full = _join(path, key)
        if isinstance(value, dict) and value:
            found.update(leaves(value, full))
        else:
            found[full] = value
    return found
