"""Switches: the node changes a key of another section makes to the graph, declared beside the nodes.

conf/dag/grpo.yaml declares, under `dag.switches`, what `reward_model.launch_reward_fn_async=true` (verl's key) does
to its nodes, and the graphs that extend it (dapo, ppo, opd) inherit that. A switch is `{key, on, nodes}`: `key` names
the key (for the messages), `on` is `${<key>}`, its value interpolated by the composition, and `nodes` is merged over
the graph's nodes while `on` is true, each field given replacing the node's (as a graph that extends another changes
a node). So the config a run composes holds the graph it runs; `graph_from_config` applies the switches that are on.
`on` is quoted in YAML ("on": ...): a bare `on` is YAML's word for true, a key of the wrong type.

A switch that moves a node into the background (`background: true`) runs it behind the reshard node, beside the
actor-side passes: it is checked as background scoring is, each problem one line naming the switch's key.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from dagrl.config.errors import ConfigError
from dagrl.dag.roles import RESHARD_FN

if TYPE_CHECKING:
    from dagrl.dag.graph import Graph


def switches_on(switches: Any) -> list[tuple[str, dict]]:
    """(key, node changes) of each switch that is on, in declaration order."""
    if switches is None:
        return []
    if not isinstance(switches, dict):
        raise ConfigError(
            "dag.switches", f"dag.switches must be a map of name to {{key, on, nodes}}, got {type(switches).__name__}"
        )
    on = []
    for name, switch in switches.items():
        if switch is None:  # removed, as a node set to null is
            continue
        key, value, nodes = switch_fields(f"dag.switches.{name}", switch)
        if value:
            on.append((key, nodes))
    return on


def switch_fields(where: str, switch: Any) -> tuple[str, bool, dict]:
    """A switch's (key, on, nodes), each problem one line naming the switch (`where`) and the fix."""
    shape = '{key: <key>, "on": ${<key>}, nodes: {id: changes}} (see conf/dag/grpo.yaml)'
    if isinstance(switch, dict) and True in switch:
        raise ConfigError(where, f'{where} has a key true: YAML reads a bare on as true; quote it, "on": ${{<key>}}')
    if not isinstance(switch, dict) or set(switch) != {"key", "on", "nodes"} or not isinstance(switch["key"], str):
        raise ConfigError(where, f"{where} must be {shape}, got {switch!r}")
    key, value, nodes = switch["key"], switch["on"], switch["nodes"] or {}
    if not isinstance(value, bool):
        raise ConfigError(
            where, f'{where}.on={value!r} is not true or false: make it the key\'s value, "on": ${{{key}}}'
        )
    if not isinstance(nodes, dict) or not all(isinstance(change, dict) for change in nodes.values()):
        raise ConfigError(where, f"{where}.nodes must be a map of node id to the fields it changes, got {nodes!r}")
    return key, value, nodes


def switched(graph: Graph, specs: list[dict], key: str, changes: dict[str, dict]) -> list[dict]:
    """The node dicts `specs` (of `graph`, built from them) with the switch `key`'s changes merged in."""
    for moved, change in changes.items():
        if change.get("background") is True:
            check_background_move(graph, changes, key, moved)
    missing = [node_id for node_id in changes if not graph.has(node_id)]
    if missing:
        raise ConfigError(
            key,
            f"{key}=true changes node {missing[0]!r}, which the graph does not have (dag.switches); set {key}=false",
        )
    out = []
    for spec in specs:
        spec = copy.deepcopy(spec)
        spec.update(copy.deepcopy(changes.get(spec["id"], {})))
        out.append(spec)
    return out


def check_background_move(graph: Graph, changes: dict[str, dict], key: str, moved: str) -> None:
    """A node moved into the background runs behind the reshard node: no node may read its columns before the
    reshard, and a node after it must wait for them (make the all-failed check of scores, a collective, on the main
    thread)."""
    position = graph.reshard
    descendants = set() if position is None else _descendants(graph, graph.nodes[position].id)
    readers = [
        node.id
        for node in graph.nodes
        if moved in node.deps and node.id not in descendants and (position is None or node is not graph.nodes[position])
    ]
    deps = {node.id: changes.get(node.id, {}).get("deps", node.deps) for node in graph.nodes}
    why = (
        f"the graph has no reshard node ({RESHARD_FN}) to score behind"
        if position is None
        else f"node {readers[0]!r} reads the scores before the reshard node"
        if readers
        else f"no node after it depends on {moved!r} to wait for the scores (as the KL-in-reward node "
        f"dagrl.nodes.reward:apply_kl_in_reward does in conf/dag/grpo.yaml)"
        if graph.has(moved) and not any(moved in node_deps for node_deps in deps.values())
        else None
    )
    if why:
        raise ConfigError(
            key,
            f"{key}=true scores in the background behind the reshard node, but {why}; set {key}=false",
        )


def _descendants(graph: Graph, root: str) -> set[str]:
    """The nodes that depend on `root`, directly or through others."""
    found = {root}
    for node in graph.nodes:  # execution order: a node's deps come before it
        if found.intersection(node.deps):
            found.add(node.id)
    return found - {root}
