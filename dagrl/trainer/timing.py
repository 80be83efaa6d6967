"""Each graph node's seconds a step, under verl's timing names, with the node's fault point and profiler range; the
console's progress lines of long phases and its estimates of the time left."""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from typing import Callable, Iterator

from dagrl.trainer.profiler import node_range
from dagrl.utils.faults import fault_point

# verl's timing names for the built-in nodes; other nodes are timed under their own id. The weight_sync node's
# seconds count in `gen` with the rollout node's: verl's generation time, from wake-up to sleep (`rollout_switch` is
# part of it).
TIMING_NAMES = {
    "weight_sync": "gen",
    "rollout": "gen",
    "score": "reward",
    "ref_log_prob": "ref",
    "advantage": "adv",
    "actor_update": "update_actor",
    "reward": "kl_in_reward",
    "critic_update": "update_critic",
}
BACKGROUND = "_background"  # run_graph's suffix for a background node's own seconds in its thread


def timing_name(node_id: str) -> str:
    """`timing_s/<this>` of a node id: verl's name, for a background node's thread too (score_background ->
    reward_background)."""
    if node_id.endswith(BACKGROUND):
        return timing_name(node_id[: -len(BACKGROUND)]) + BACKGROUND
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


def duration(seconds: float) -> str:
    """A time left at the precision it deserves: '40s', '21m', '6h05m' (no colon: console lines split on it)."""
    if seconds < 59.5:
        return f"{max(seconds, 0):.0f}s"
    minutes = round(seconds / 60)
    return f"{minutes}m" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


class Progress:
    """A long phase on the console: at most one line every `every_s` seconds (none for a phase shorter than that),
    with the share done, the seconds so far and those left at the rate so far; `finish` closes a phase that showed
    progress with its total."""

    def __init__(self, label: str, total: int, unit: str, say: Callable[..., None], every_s: float = 10.0) -> None:
        self.label, self.total, self.unit, self.say, self.every_s = label, total, unit, say, every_s
        self.start = self.last = time.perf_counter()
        self.shown = False

    def update(self, done: int) -> None:
        now = time.perf_counter()
        if done <= 0 or done >= self.total or now - self.last < self.every_s:
            return
        self.last, self.shown = now, True
        elapsed = now - self.start
        self.say(
            "%s: %d/%d %s, %.0f s, about %.0f s left",
            self.label,
            done,
            self.total,
            self.unit,
            elapsed,
            elapsed * (self.total - done) / done,
        )

    def finish(self) -> None:
        if self.shown:
            self.say("%s: %d %s in %.0f s", self.label, self.total, self.unit, time.perf_counter() - self.start)
