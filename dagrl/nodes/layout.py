"""The node that moves the batch from the rollout layout to the actor layout (see dagrl/data/layout.py).

It sits after the rollout-side nodes (rollout, score, dynamic sampling) and before anything that runs the actor,
reference or critic or computes advantages: those need every rank of a model-parallel group to hold the same rows
and each GRPO group whole on one DP rank.
"""

from __future__ import annotations

from dagrl.config.errors import ConfigError
from dagrl.dag.graph import RESHARD, RESHARD_FN, Graph
from dagrl.data.batch import Batch
from dagrl.data.layout import to_actor_layout as move
from dagrl.nodes.context import StepContext

# Node roles that need the actor layout: everything after the move.
ACTOR_SIDE_ROLES = ("actor", "reference", "teacher", "critic", "advantage")
ROLLOUT_SIDE_FNS = ("dagrl.nodes.dynamic_sampling",)  # modules whose nodes count groups in the rollout layout


def to_actor_layout(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    groups_per_mini_batch = ctx.cfg.actor_rollout_ref.actor.ppo_mini_batch_size
    return move(batch, ctx.shape.layout, groups_per_mini_batch, balance=ctx.cfg.trainer.balance_batch)


def check_graph(graph: Graph, world_size: int) -> None:
    """A multi-process run needs the reshard node, after the rollout-side nodes and before the actor-side ones."""
    position = graph.reshard
    if position is None:
        if world_size > 1:
            raise ConfigError(
                "dag.nodes",
                f"the graph has no node with role {RESHARD} ({RESHARD_FN}); a run of more "
                f"than one process needs it after scoring (see conf/dag/grpo.yaml)",
            )
        return
    reshard = graph.nodes[position].id
    for node in graph.nodes[:position]:
        if node.role in ACTOR_SIDE_ROLES:
            raise ConfigError(
                "dag.nodes",
                f"node {node.id!r} (role {node.role}) runs before the reshard node "
                f"{reshard!r}; make it depend on {reshard!r}",
            )
    for node in graph.nodes[position + 1 :]:
        if node.fn.__module__ in ROLLOUT_SIDE_FNS:
            raise ConfigError(
                "dag.nodes",
                f"node {node.id!r} must run before the reshard node {reshard!r} (it "
                f"counts groups in the rollout layout); make {reshard!r} depend on it",
            )
