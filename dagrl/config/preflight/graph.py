"""Pre-flight of dag.*: the roles and ids of the graph's nodes, read from the node dicts without importing their
functions (dag.graph.preflight_graph checks the graph itself)."""

from __future__ import annotations

from typing import Any

from dagrl.config.errors import require
from dagrl.config.tree import Cfg
from dagrl.dag.graph import RESHARD, RESHARD_FN

LOG_PROB_NODES = "dagrl.nodes.log_prob:"
UPDATE_FN = "dagrl.nodes.actor:update_actor"


def graph_node_dicts(cfg: Cfg) -> Any:
    """The graph's node dicts: what dag.custom_pipeline_fn returns, else dag.nodes (a map by id or a list)."""
    from dagrl.dag.graph import node_list, pipeline_nodes

    dag = cfg.dag
    if dag.custom_pipeline_fn:
        return pipeline_nodes(dag.custom_pipeline_fn)
    return node_list(dag.nodes.to_dict() if isinstance(dag.nodes, Cfg) else dag.nodes)


def graph_roles(cfg: Cfg) -> set[str]:
    """The roles of the graph's nodes (dag.nodes, or what dag.custom_pipeline_fn returns)."""
    nodes = graph_node_dicts(cfg)
    if not isinstance(nodes, (list, tuple)):  # not a graph: dag.graph.preflight_graph says so, in one line
        return set()
    return {node.get("role") for node in nodes if isinstance(node, dict)}


def check_graph_nodes(cfg: Cfg, world_size: int) -> None:
    """What the node dicts (dag.nodes, or what dag.custom_pipeline_fn returns) show without importing their
    functions (dag.graph.preflight_graph checks the graph itself)."""
    custom = cfg.dag.custom_pipeline_fn
    source = "dag.custom_pipeline_fn" if custom else "dag.nodes"
    nodes = graph_node_dicts(cfg)
    if not isinstance(nodes, (list, tuple)):  # preflight_graph names it
        return
    nodes = [node for node in nodes if hasattr(node, "get")]  # else: preflight_graph names it
    ids = [node.get("id") for node in nodes]
    twice = next((i for i in ids if ids.count(i) > 1), None)
    require(
        twice is None or custom,
        "dag.nodes",  # (a pipeline's own duplicate: build_graph's line names it)
        f"dag.nodes: node id {twice!r} appears twice "
        f"(nodes {', '.join(str(n) for n, i in enumerate(ids) if i == twice)})"
        f": give each node its own id (deps name nodes by id)",
    )
    fns = [str(node.get("fn", "")) for node in nodes]
    roles = [node.get("role") for node in nodes]
    require(
        world_size == 1 or RESHARD in roles,
        source,
        f"{world_size} processes but the graph{f' {custom} returns' if custom else ''} has no node with role "
        f"{RESHARD} ({RESHARD_FN}): add it after scoring (as conf/dag/grpo.yaml does) so that batches reach the "
        f"actor layout",
    )
    # an actor node other than the log-prob passes is the update (conf/dag's actor_update, or the user's own)
    updates = [fn for fn, role in zip(fns, roles) if role == "actor" and not fn.startswith(LOG_PROB_NODES)]
    require(
        bool(updates) or not nodes or cfg.trainer.val_only,  # (no nodes at all: preflight_graph names it)
        source,
        f"{source}: the graph{f' {custom} returns' if custom else ''} has no actor update (no node with role "
        f"actor besides the "
        f'log-prob passes): the run would train nothing; add {{role: actor, fn: "{UPDATE_FN}"}} after the '
        f"advantage (as conf/dag/grpo.yaml's actor_update), or set trainer.val_only=true to only validate",
    )
    require(
        not cfg.algorithm.filter_groups.enable or any(fn.startswith("dagrl.nodes.dynamic_sampling:") for fn in fns),
        "algorithm.filter_groups.enable",
        "algorithm.filter_groups.enable=true but the graph has no dynamic_sampling node: use dag=dapo",
    )
