"""Each graph node's seconds a step, under verl's timing names, with the node's fault point and profiler range."""
from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from typing import Callable, Iterator

from dagrl.trainer.profiler import node_range
from dagrl.utils.faults import fault_point

# verl's timing names for the built-in nodes; other nodes are timed under their own id.
TIMING_NAMES = {"rollout": "gen", "score": "reward", "ref_log_prob": "ref", "advantage": "adv",
                "actor_update": "update_actor", "reward": "kl_in_reward", "critic_update": "update_critic"}
BACKGROUND = "_background"  # run_graph's suffix for a background node's own seconds in its thread


def timing_name(node_id: str) -> str:
    """`timing_s/<this>` of a node id: verl's name, for a background node's thread too (score_background ->
    reward_background)."""
    if node_id.endswith(BACKGROUND):
        return timing_name(node_id[:-len(BACKGROUND)]) + BACKGROUND
    return TIMING_NAMES.get(node_id, node_id)


class Timer:
    """Seconds by timing name, summed over the calls of a step."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[timing_name(name)] += time.perf_counter() - start


def node_timer(timer: Timer, step: int) -> Callable[[str], contextlib.AbstractContextManager]:
    """run_graph's timer: `timer`, each node's fault point first, and a profiler range around the node."""
    @contextlib.contextmanager
    def timed(name: str) -> Iterator[None]:
        fault_point(name, step)
        with timer(name), node_range(name):
            yield

    return timed
