"""The node graph: built from conf/dag/<name>.yaml (or a Python function), validated, run in topological order.

A node is a plain function `(ctx, batch) -> (batch, metrics)`. The graph checks everything it can before the
first step: duplicate ids, unknown deps, cycles, unknown roles, missing required roles, functions that do not
import. Each problem is one line naming the node.
"""
from __future__ import annotations

import dataclasses
import graphlib
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from dagrl.config.errors import ConfigError

ROLES = ("rollout", "actor", "reference", "critic", "reward", "advantage", "custom")
REQUIRED_ROLES = ("rollout", "advantage", "actor")
NODE_KEYS = {"id", "role", "fn", "deps", "config"}


@dataclass(frozen=True)
class Node:
    id: str
    role: str
    fn: Callable[..., Any]
    deps: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]  # in execution (topological) order

    def roles(self) -> set[str]:
        return {node.role for node in self.nodes}

    def has(self, node_id: str) -> bool:
        return any(node.id == node_id for node in self.nodes)


def import_function(spec: str, key: str) -> Callable[..., Any]:
    """'pkg.module:function' -> the function; ConfigError naming `key` when it cannot be loaded."""
    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        raise ConfigError(key, f"{key}={spec!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(key, f"{key}={spec!r}: cannot import module {module_name!r} ({err})") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ConfigError(key, f"{key}={spec!r}: module {module_name!r} has no function {function_name!r}")
    return function


def build_graph(node_specs: list[dict[str, Any]], source: str = "dag.nodes") -> Graph:
    """Validate node dicts and order them; `source` names where they came from in error messages."""
    if not node_specs:
        raise ConfigError(source, f"{source} is empty: a graph needs at least rollout, advantage and actor nodes")
    by_id: dict[str, Node] = {}
    for position, spec in enumerate(node_specs):
        where = f"{source}[{position}]"
        if not isinstance(spec, dict) or "id" not in spec:
            raise ConfigError(source, f"{where} must be a mapping with at least id, role and fn")
        unknown = set(spec) - NODE_KEYS
        if unknown:
            raise ConfigError(source, f"{where} (node {spec['id']!r}) has unknown fields {sorted(unknown)}; "
                                      f"allowed: {sorted(NODE_KEYS)}")
        node_id = spec["id"]
        if node_id in by_id:
            raise ConfigError(source, f"{source}: node id {node_id!r} appears twice")
        role = spec.get("role")
        if role not in ROLES:
            raise ConfigError(source, f"{source}: node {node_id!r} has role {role!r}; valid roles: {', '.join(ROLES)}")
        if "fn" not in spec:
            raise ConfigError(source, f"{source}: node {node_id!r} has no fn (module:function)")
        fn = spec["fn"] if callable(spec["fn"]) else import_function(spec["fn"], f"{source}[{node_id}].fn")
        by_id[node_id] = Node(id=node_id, role=role, fn=fn, deps=tuple(spec.get("deps") or ()),
                              config=dict(spec.get("config") or {}))
    for node in by_id.values():
        for dep in node.deps:
            if dep not in by_id:
                raise ConfigError(source, f"{source}: node {node.id!r} depends on unknown node {dep!r}; "
                                          f"known: {', '.join(by_id)}")
    sorter = graphlib.TopologicalSorter({node.id: node.deps for node in by_id.values()})
    try:
        order = list(sorter.static_order())
    except graphlib.CycleError as err:
        cycle = " -> ".join(err.args[1])
        raise ConfigError(source, f"{source}: the graph has a cycle: {cycle}") from None
    missing = [role for role in REQUIRED_ROLES if role not in {n.role for n in by_id.values()}]
    if missing:
        raise ConfigError(source, f"{source}: no node with role {', '.join(missing)}; a training graph needs "
                                  f"{', '.join(REQUIRED_ROLES)}")
    return Graph(nodes=tuple(by_id[node_id] for node_id in order))


def graph_from_config(dag_cfg: Any) -> Graph:
    """The graph named by the `dag` config group, or built by dag.custom_pipeline_fn."""
    if dag_cfg.custom_pipeline_fn:
        factory = import_function(dag_cfg.custom_pipeline_fn, "dag.custom_pipeline_fn")
        return build_graph(factory(), source="dag.custom_pipeline_fn")
    return build_graph(dag_cfg.to_dict()["nodes"] if hasattr(dag_cfg, "to_dict") else dag_cfg["nodes"])


def run_graph(graph: Graph, ctx: Any, batch: Any, timer: Callable[[str], Any]) -> tuple[Any, dict[str, float]]:
    """Run every node in order; `ctx` is given to each node with its own per-node config."""
    metrics: dict[str, float] = {}
    for node in graph.nodes:
        node_ctx = dataclasses.replace(ctx, node_config=node.config)
        with timer(node.id):
            batch, node_metrics = node.fn(node_ctx, batch)
        metrics.update(node_metrics)
    return batch, metrics
