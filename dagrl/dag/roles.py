"""The roles a node may have, and the two that give a graph its structure: the weight sync before the rollout and the
reshard between the rollout layout and the actor layout. Checks, the split into separate pools and the switches
(dagrl/dag/switches.py) read a node's role, never its function."""

from __future__ import annotations

ROLES = (
    "weight_sync",
    "rollout",
    "actor",
    "reference",
    "teacher",
    "critic",
    "reward",
    "advantage",
    "reshard",
    "custom",
)
# The weight sync wakes the rollout engine with the actor's latest weights (the GPU memory choreography of a colocated
# rollout: dagrl.nodes.rollout:weight_sync); every rollout node runs after one, and puts the engine back to sleep.
WEIGHT_SYNC = "weight_sync"
WEIGHT_SYNC_FN = "dagrl.nodes.rollout:weight_sync"
# The reshard node moves the batch from the rollout layout to the actor layout (dagrl.nodes.layout:to_actor_layout):
# the nodes before it run on the rollout's shards, those after it on the actor's. A graph has at most one; the layout
# check, the split into separate pools and background scoring read its place in the graph.
RESHARD = "reshard"
RESHARD_FN = "dagrl.nodes.layout:to_actor_layout"
REQUIRED_ROLES = ("rollout", "advantage", "actor")
BACKGROUND_ROLES = ("reward", "custom")  # the others drive engines and collectives, which only the main thread may
