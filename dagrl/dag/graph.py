"""The node graph: built from conf/dag/<name>.yaml (or a Python function), validated, run in topological order.

A node is a plain function `(ctx, batch) -> (batch, metrics)`. The graph checks everything it can before the
first step: duplicate ids, unknown deps, cycles, unknown roles, missing required roles, functions that do not
import or cannot take `(ctx, batch)`, a custom_pipeline_fn that raises, exits or returns no list. Each problem is
one line naming the node. Pre-flight (`preflight_graph`) runs the same checks without importing dagrl's own node
modules (they import torch), so a user's graph or node function fails in a second.

`graph_from_config` builds the graph a run's config declares: `dag.nodes` (or dag.custom_pipeline_fn's), with the
switches that are on merged in (dag/switches.py), every rollout node after a weight sync. Pre-flight builds it once
and the trainer runs exactly that graph (`imported`: dagrl's node functions in place of their stand-ins), cut at the
reshard node when the pools are separate.

A node marked `background: true` runs in a thread beside the nodes that do not depend on it (scoring on the CPU while
the GPU computes log-probs: reward_model.launch_reward_fn_async); the first node that depends on it waits for it. It
works on a shallow copy of the batch, whose new columns join the batch then, and must not call collectives or
engines (the main thread's nodes use them meanwhile; `in_background` tells a node where it runs); nodes between may
add columns but not change rows.
"""

from __future__ import annotations

import copy
import dataclasses
import graphlib
import inspect
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from dagrl.config.errors import ConfigError
from dagrl.dag.functions import StandIn, check_node_signature, import_function, lazy_import
from dagrl.dag.switches import switched, switches_on
from dagrl.dag.roles import BACKGROUND_ROLES, REQUIRED_ROLES, RESHARD, RESHARD_FN, ROLES, WEIGHT_SYNC, WEIGHT_SYNC_FN

logger = logging.getLogger(__name__)
_THREAD = threading.local()  # .node: the id of the background node this thread runs

NODE_KEYS = {"id", "role", "fn", "deps", "config", "background"}


@dataclass(frozen=True)
class Node:
    id: str
    role: str
    fn: Callable[..., Any]
    deps: tuple[str, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    background: bool = False  # runs in a thread until a node that depends on it needs its columns


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]  # in execution (topological) order

    def roles(self) -> set[str]:
        return {node.role for node in self.nodes}

    def has(self, node_id: str) -> bool:
        return any(node.id == node_id for node in self.nodes)

    def describe(self) -> str:
        """The nodes in run order, each with what it waits for where that is not the node before it, and the
        background ones marked: `weight_sync -> rollout -> score [background, after to_actor_layout] -> ...`."""
        words, previous = [], None
        for node in self.nodes:
            notes = ["background"] if node.background else []
            if list(node.deps) != ([previous] if previous else []):
                notes.append("after " + (", ".join(node.deps) or "nothing"))
            words.append(node.id + (f" [{'; '.join(notes)}]" if notes else ""))
            previous = node.id
        return " -> ".join(words)

    @property
    def reshard(self) -> int | None:
        """The reshard node's position in execution order (None: the graph has none)."""
        return next((i for i, node in enumerate(self.nodes) if node.role == RESHARD), None)


def node_list(nodes: Any, source: str = "dag.nodes") -> Any:
    """`dag.nodes` as a list of node dicts. conf/dag/ writes a map (id -> node), which Hydra composes (a graph that
    extends another names only the nodes it adds or changes; a node set to null is removed); a list of node dicts,
    each with its id, is read as it is (custom_pipeline_fn returns one). Anything else is left for build_graph to
    name."""
    if not isinstance(nodes, dict):
        return nodes
    specs = []
    for node_id, node in nodes.items():
        if node is None:
            continue
        if isinstance(node, dict) and node.get("id", node_id) != node_id:
            raise ConfigError(
                source,
                f"{source}.{node_id} has id {node['id']!r}: a node's id is its key in the map; drop the id field",
            )
        specs.append({"id": node_id, **node} if isinstance(node, dict) else node)
    return specs


def build_graph(
    node_specs: Any, source: str = "dag.nodes", load: Callable[[str, str], Callable[..., Any]] = import_function
) -> Graph:
    """Validate node dicts (a list, or a map by id: node_list) and order them; `source` names where they came from
    in error messages, `load` turns a 'module:function' into the function."""
    node_specs = node_list(node_specs, source)
    if not isinstance(node_specs, (list, tuple)):
        raise ConfigError(
            source,
            f"{source} must be a map of node id to node (role, fn, deps) or a list of node "
            f"dicts (id, role, fn, deps), got {type(node_specs).__name__}",
        )
    if not node_specs:
        raise ConfigError(source, f"{source} is empty: a graph needs at least rollout, advantage and actor nodes")
    by_id: dict[str, Node] = {}
    for position, spec in enumerate(node_specs):
        where = f"{source}[{position}]"
        if not isinstance(spec, dict) or "id" not in spec:
            raise ConfigError(source, f"{where} must be a mapping with at least id, role and fn, got {spec!r}")
        unknown = set(spec) - NODE_KEYS
        if unknown:
            raise ConfigError(
                source,
                f"{where} (node {spec['id']!r}) has unknown fields {sorted(unknown)}; allowed: {sorted(NODE_KEYS)}",
            )
        node_id = spec["id"]
        if node_id in by_id:
            raise ConfigError(source, f"{source}: node id {node_id!r} appears twice")
        role = spec.get("role")
        if role not in ROLES:
            raise ConfigError(source, f"{source}: node {node_id!r} has role {role!r}; valid roles: {', '.join(ROLES)}")
        if "fn" not in spec:
            raise ConfigError(source, f"{source}: node {node_id!r} has no fn (module:function)")
        if spec["fn"] == RESHARD_FN and role != RESHARD:
            raise ConfigError(
                source,
                f"{source}: node {node_id!r} runs {RESHARD_FN} with role {role}: give it role "
                f"{RESHARD} (the move to the actor layout)",
            )
        if role == RESHARD and any(node.role == RESHARD for node in by_id.values()):
            raise ConfigError(
                source,
                f"{source}: nodes {next(n.id for n in by_id.values() if n.role == RESHARD)!r} "
                f"and {node_id!r} both have role {RESHARD}: a graph moves its batch to the "
                f"actor layout once",
            )
        deps = spec.get("deps") or ()
        # deps=rollout (a string) would be read letter by letter: "depends on unknown node 'r'"
        if not isinstance(deps, (list, tuple)) or not all(isinstance(dep, str) for dep in deps):
            raise ConfigError(
                source,
                f"{source}: node {node_id!r} has deps={deps!r}, not a list of node ids: "
                f"write deps as a list, e.g. [{deps if isinstance(deps, str) else 'rollout'}]",
            )
        key = f"{source}[{node_id}].fn"
        fn = spec["fn"] if callable(spec["fn"]) else load(str(spec["fn"]), key)
        check_node_signature(fn, key, getattr(fn, "__qualname__", None) if callable(spec["fn"]) else spec["fn"])
        background = spec.get("background", False)
        if not isinstance(background, bool):
            raise ConfigError(source, f"{source}: node {node_id!r} has background={background!r}; write true or false")
        if background and role not in BACKGROUND_ROLES:
            raise ConfigError(
                source,
                f"{source}: node {node_id!r} (role {role}) cannot run in the background: only "
                f"{' and '.join(BACKGROUND_ROLES)} nodes may (the others drive engines and "
                f"collectives); drop its background: true",
            )
        by_id[node_id] = Node(
            id=node_id, role=role, fn=fn, deps=tuple(deps), config=dict(spec.get("config") or {}), background=background
        )
    for node in by_id.values():
        for dep in node.deps:
            if dep not in by_id:
                raise ConfigError(
                    source, f"{source}: node {node.id!r} depends on unknown node {dep!r}; known: {', '.join(by_id)}"
                )
    sorter = graphlib.TopologicalSorter({node.id: node.deps for node in by_id.values()})
    try:
        sorter.prepare()
    except graphlib.CycleError as err:
        cycle = " -> ".join(err.args[1])
        raise ConfigError(source, f"{source}: the graph has a cycle: {cycle}") from None
    order: list[str] = []
    while sorter.is_active():  # static_order's order, but a background node starts before the others that are ready
        ready = sorted(sorter.get_ready(), key=lambda node_id: not by_id[node_id].background)
        order.extend(ready)
        sorter.done(*ready)
    missing = [role for role in REQUIRED_ROLES if role not in {n.role for n in by_id.values()}]
    if missing:
        raise ConfigError(
            source,
            f"{source}: no node with role {', '.join(missing)}; a training graph needs {', '.join(REQUIRED_ROLES)}",
        )
    return Graph(nodes=tuple(by_id[node_id] for node_id in order))


# factory -> the node dicts it returned: pre-flight's checks and the trainer read one call's graph
_PIPELINES: dict[Callable[..., Any], list | tuple] = {}


def pipeline_nodes(spec: str) -> Any:
    """The node dicts `dag.custom_pipeline_fn` returns: called once, with no arguments (a copy each time after).
    One that needs arguments, raises or exits is named in one line (a SystemExit from it would otherwise end the
    trainer, with exit 0 for a bare sys.exit())."""
    key = "dag.custom_pipeline_fn"
    factory = import_function(spec, key)
    if factory not in _PIPELINES:
        _PIPELINES[factory] = _call_pipeline(spec, factory)
    return copy.deepcopy(_PIPELINES[factory])


def _call_pipeline(spec: str, factory: Callable[..., Any]) -> list | tuple:
    key = "dag.custom_pipeline_fn"
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        try:
            signature.bind()
        except TypeError as error:
            raise ConfigError(
                key,
                f"{key}={spec!r}: {factory.__name__}{signature} cannot be called with no "
                f"arguments ({error}); the trainer calls it as {factory.__name__}() and expects a "
                f"list of node dicts",
            ) from None
    try:
        nodes = factory()
    except SystemExit as error:
        raise ConfigError(
            key,
            f"{key}={spec!r} called sys.exit({'' if error.code is None else repr(error.code)}); "
            f"it must return a list of node dicts (id, role, fn, deps), not exit",
        ) from None
    except Exception as error:
        text = str(error).strip().splitlines()
        raise ConfigError(
            key,
            f"{key}={spec!r} raised {type(error).__name__}: {text[0] if text else ''}; fix the "
            f"function (it returns a list of node dicts: id, role, fn, deps)",
        ) from None
    nodes = node_list(nodes, key)
    if not isinstance(nodes, (list, tuple)):
        raise ConfigError(
            key,
            f"{key}={spec!r} returned {type(nodes).__name__}, not a map of node id to node or a "
            f"list of node dicts (id, role, fn, deps): return one of them",
        )
    return nodes


def graph_from_config(dag_cfg: Any, load: Callable[[str, str], Callable[..., Any]] = import_function) -> Graph:
    """The graph the trainer runs: `dag.nodes` (or what dag.custom_pipeline_fn returns) with the switches that are
    on merged in (dag.switches, dagrl/dag/switches.py); every rollout node has a weight sync before it."""
    data = dag_cfg.to_dict() if hasattr(dag_cfg, "to_dict") else dict(dag_cfg)
    custom = data.get("custom_pipeline_fn")
    source = "dag.custom_pipeline_fn" if custom else "dag.nodes"
    specs = pipeline_nodes(custom) if custom else node_list(data["nodes"])
    graph = build_graph(specs, source=source, load=load)
    for key, changes in switches_on(data.get("switches")):
        specs = switched(graph, specs, key, changes)
        graph = build_graph(specs, source=f"{source} ({key})", load=load)
    check_weight_sync(graph, source)
    return graph


def check_weight_sync(graph: Graph, source: str) -> None:
    """Every rollout node runs after a weight_sync node, which wakes the rollout engine with the actor's weights."""
    synced: set[str] = set()  # nodes with a weight_sync node among their deps, directly or through others
    for node in graph.nodes:
        if node.role == WEIGHT_SYNC or synced.intersection(node.deps):
            synced.add(node.id)
        if node.role == "rollout" and node.id not in synced:
            raise ConfigError(
                source,
                f"{source}: node {node.id!r} (role rollout) has no node with role {WEIGHT_SYNC} before it to "
                f"wake the rollout engine with the actor's weights; add weight_sync: {{role: {WEIGHT_SYNC}, "
                f"fn: {WEIGHT_SYNC_FN}, deps: []}} and make {node.id!r} depend on it (as conf/dag/grpo.yaml does)",
            )


def preflight_graph(dag_cfg: Any) -> Graph:
    """The graph's checks before any model: user node functions imported and their signatures checked, the
    pipeline factory dry-called, dagrl's own node modules left unimported (their functions are StandIns, see
    lazy_import). The graph built is the run's: the trainer takes it through `imported`."""
    return graph_from_config(dag_cfg, load=lazy_import)


def imported(graph: Graph) -> Graph:
    """Pre-flight's graph with dagrl's own node functions imported in place of their stand-ins: the graph that runs."""
    return Graph(
        nodes=tuple(
            dataclasses.replace(node, fn=import_function(node.fn.spec, f"dag.nodes[{node.id}].fn"))
            if isinstance(node.fn, StandIn)
            else node
            for node in graph.nodes
        )
    )


def in_background() -> bool:
    """Whether the calling node runs in a background thread, where it must leave collectives to the main thread."""
    return getattr(_THREAD, "node", None) is not None


def run_graph(graph: Graph, ctx: Any, batch: Any, timer: Callable[[str], Any]) -> tuple[Any, dict[str, float]]:
    """Run every node in order; `ctx` is given to each node with its own per-node config. A background node starts
    in a thread and is joined by the first node that depends on it (or at the end): `timer(id)` then times the wait,
    the step's cost of it, and `timer(id + "_background")` its own seconds in the thread."""
    metrics: dict[str, float] = {}
    running: dict[str, Background] = {}
    try:
        for node in graph.nodes:
            for dep in node.deps:
                if dep in running:
                    batch = running.pop(dep).join(batch, metrics, timer)
            node_ctx = dataclasses.replace(ctx, node_config=node.config)
            if node.background:
                running[node.id] = Background(node, node_ctx, batch, timer)
                continue
            with timer(node.id):
                batch, node_metrics = node.fn(node_ctx, batch)
            metrics.update(node_metrics)
        for node_id in list(running):
            batch = running.pop(node_id).join(batch, metrics, timer)
    finally:
        for job in running.values():  # a node failed: let the thread end before the error leaves the step
            job.abandon()
    return batch, metrics


class Background:
    """One background node's run in a thread, on a shallow copy of the batch."""

    def __init__(self, node: Node, ctx: Any, batch: Any, timer: Callable[[str], Any]) -> None:
        self.node, self.rows = node, len(batch)
        self.before = {key: batch[key] for key in batch.keys()}
        self.outcome: dict[str, Any] = {}
        copy = type(batch)()
        copy.tensors, copy.columns = dict(batch.tensors), dict(batch.columns)

        def run() -> None:
            _THREAD.node = node.id
            try:
                with timer(f"{node.id}_background"):
                    self.outcome["result"] = node.fn(ctx, copy)
            except BaseException as error:  # re-raised by join on the main thread
                self.outcome["error"] = error

        self.thread = threading.Thread(target=run, name=f"dagrl-node-{node.id}", daemon=True)
        self.thread.start()

    def join(self, batch: Any, metrics: dict[str, float], timer: Callable[[str], Any]) -> Any:
        """The batch with the node's new columns; its metrics into `metrics`; its error raised here."""
        with timer(self.node.id):
            self.thread.join()
        if "error" in self.outcome:
            raise self.outcome["error"]
        out, node_metrics = self.outcome["result"]
        if not _same_rows(batch, self.rows, self.before):
            raise RuntimeError(
                f"a node changed the batch's rows while background node {self.node.id!r} worked on "
                f"them, so its columns no longer fit: make that node depend on {self.node.id!r}"
            )
        for key in out.keys():
            if key not in self.before or out[key] is not self.before[key]:
                batch[key] = out[key]
        metrics.update(node_metrics)
        return batch

    def abandon(self) -> None:
        """Wait for the thread (a scorer has its own time limit) and log its error: the main thread's goes up."""
        self.thread.join()
        if "error" in self.outcome:
            logger.warning("background node %r also failed: %r", self.node.id, self.outcome["error"])


def _same_rows(batch: Any, rows: int, before: dict[str, Any]) -> bool:
    """Whether `batch` holds the `rows` rows it held when the columns `before` were taken: the same uids (GRPO
    groups) and responses (the same tensor, or equal ones)."""
    import torch

    if len(batch) != rows:
        return False
    if "uid" in before and ("uid" not in batch or list(batch["uid"]) != list(before["uid"])):
        return False
    now, then = batch.get("responses"), before.get("responses")
    return now is then or (now is not None and then is not None and torch.equal(now, then))
