"""Dotted keys of a composed config: looking one up, and the valid key nearest a mistyped one (for error lines)."""

from __future__ import annotations

import difflib
from typing import Any


def lookup(tree: Any, dotted: str) -> tuple[bool, Any]:
    """(exists, value) of a dotted key; a digit part indexes a list, as Hydra's `dag.nodes.1.fn=...` does.
    An index past a list's end raises IndexError naming the list and its length."""
    node, path = tree, []
    for part in dotted.split("."):
        if isinstance(node, list) and part.isdigit():
            if int(part) >= len(node):
                where = ".".join(path)
                raise IndexError(
                    f"{where} has {len(node)} items (indices 0..{len(node) - 1}): use one of them, or "
                    f"set the whole list: {where}=[...]"
                )
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return False, None
        path.append(part)
    return True, node


def all_paths(tree: dict[str, Any], prefix: str = "") -> list[str]:
    paths = []
    for key, value in tree.items():
        full = f"{prefix}.{key}" if prefix else key
        paths.append(full)
        if isinstance(value, dict):
            paths.extend(all_paths(value, full))
    return paths


def closest_key(key: str, tree: dict[str, Any]) -> str | None:
    """The valid dotted key most like `key`: the same leaf name elsewhere, a sibling whose name is a near miss, or
    a near miss of the whole key; None rather than a key that merely shares the section (model.use_shm is not
    model.path)."""
    candidates = [c for c in all_paths(tree) if not key.startswith(c + ".")]
    under = [c for c in candidates if c.endswith("." + key)]  # a section prefix left out: actor.optim.lr
    if len(under) == 1:
        return under[0]
    parent, _, leaf = key.rpartition(".")
    same_leaf = [c for c in candidates if c.rsplit(".", 1)[-1] == leaf]
    if len(same_leaf) == 1:
        return same_leaf[0]
    if same_leaf:
        match = difflib.get_close_matches(key, same_leaf, n=1, cutoff=0.5)
        return match[0] if match else None
    siblings = {c.rpartition(".")[2]: c for c in candidates if c.rpartition(".")[0] == parent}
    cut_short = [name for name in siblings if name.startswith(leaf + "_")]  # overlong_buffer.penalty: penalty_factor
    if len(cut_short) == 1:
        return siblings[cut_short[0]]
    match = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.7)
    if match:
        return siblings[match[0]]
    # a typo in a section name: the leaf must be (nearly) the same too, else the long shared prefix alone would make
    # megatron.use_mbridge "close" to megatron.seed, or val_kwargs.greedy to val_kwargs.n
    near_leaf = [c for c in candidates if difflib.SequenceMatcher(None, c.rsplit(".", 1)[-1], leaf).ratio() >= 0.8]
    match = difflib.get_close_matches(key, near_leaf, n=1, cutoff=0.85)
    return match[0] if match else None


def section_keys(key: str, tree: dict[str, Any]) -> str:
    """'; <section> has: a, b, ...' for the deepest existing section above `key` (when it is short enough to list)."""
    parts = key.split(".")
    for end in range(len(parts) - 1, 0, -1):
        exists, node = lookup(tree, ".".join(parts[:end]))
        if exists and isinstance(node, dict):
            names = list(node)
            if len(names) > 14:
                return "; see docs/config_reference.md for the keys"
            return f"; {'.'.join(parts[:end])} has: {', '.join(names)}"
    return f"; the sections are: {', '.join(tree)}"
