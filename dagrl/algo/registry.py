"""Named algorithm parts (advantage estimators, policy losses, loss aggregations, KL estimators), each declared once.

An `Entry` names a function by "module:function" and imports it on first call, so the names, docs and traits
are read without torch: pre-flight (dagrl/config), the inert-key rules and scripts/gen_config_reference.py read
them from dagrl/algo/catalog.py, and the trainer calls the same entries. Adding one is its function, its
`register` line in the catalog, its test and its doc line.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator


@dataclass(frozen=True)
class Entry:
    name: str
    target: str  # "module:function", imported on first call
    doc: str  # one line: what it is and when to use it (docs/algorithms.md's table)
    verl: str | None = None  # verl 0.9's name for it; None where verl has no counterpart
    differs: str = ""  # how dagrl's differs from verl's ("" = it does not)
    aliases: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()  # the config keys it reads (under the registry's section), as `key` or `a.b`
    needs: tuple[str, ...] = ()  # batch fields another node must provide ("values": a critic)
    group: bool = False  # an estimator relative to the prompt's group of responses
    lone: str = ""  # an estimator's result for a group of one (rollout.n=1): why pre-flight refuses it
    aggregation: str | None = None  # a loss that fixes its own loss_agg_mode, as verl does
    straight_through: bool = False  # a KL estimator whose gradient is k2's (verl's "+" names)
    _fn: list = field(default_factory=list, repr=False, compare=False)

    @property
    def fn(self) -> Callable[..., Any]:
        if not self._fn:
            module, name = self.target.split(":")
            self._fn.append(getattr(importlib.import_module(module), name))
        return self._fn[0]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


class Registry:
    """The entries of one kind, in declaration order; `keys` are the config keys whose values are its names."""

    def __init__(self, kind: str, keys: tuple[str, ...], section: str) -> None:
        self.kind, self.keys, self.section = kind, keys, section
        self._entries: dict[str, Entry] = {}
        self._by_name: dict[str, Entry] = {}
        self.refused: dict[str, str] = {}  # names users may write (verl's) that dagrl refuses, with the reason

    def register(self, name: str, target: str, doc: str, **traits: Any) -> Entry:
        entry = Entry(name, target, doc, **traits)
        taken = [n for n in (name, *entry.aliases) if n in self._by_name or n in self.refused]
        if taken:
            raise ValueError(f"{self.kind} {taken[0]!r} is registered twice")
        self._entries[name] = entry
        self._by_name.update({n: entry for n in (name, *entry.aliases)})
        return entry

    def unregister(self, name: str) -> None:
        entry = self._entries.pop(name)
        for alias in (name, *entry.aliases):
            del self._by_name[alias]

    def refuse(self, name: str, reason: str) -> None:
        self.refused[name] = reason

    def names(self) -> tuple[str, ...]:
        """Every name a config may give, aliases after their entry's name."""
        return tuple(n for entry in self._entries.values() for n in (entry.name, *entry.aliases))

    @property
    def choices(self) -> "Names":
        """The names as a key's declared choices hold them (dagrl/config/schema/): a live view, so a registration
        made later counts."""
        return Names(self)

    def __iter__(self) -> Iterator[Entry]:
        return iter(tuple(self._entries.values()))

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def get(self, name: object) -> Entry | None:
        return self._by_name.get(name)  # type: ignore[arg-type]

    def __getitem__(self, name: str) -> Entry:
        entry = self._by_name.get(name)
        if entry is None:
            raise ValueError(f"{self.keys[0]}={name!r} is not one of: {', '.join(self.names())}")
        return entry


class Names(Sequence):
    """A registry's current names, read on every use."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def __getitem__(self, index):  # type: ignore[override]
        return self.registry.names()[index]

    def __len__(self) -> int:
        return len(self.registry.names())

    def __contains__(self, name: object) -> bool:
        return name in self.registry

    def __repr__(self) -> str:
        return repr(self.registry.names())
