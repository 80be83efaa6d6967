"""Fault injection for the reliability tests, driven by environment variables (no effect when unset).

DAGRL_FAULT=<phase>[:<step>][@<rank>]  SIGKILL this process when it reaches <phase> (a node id, validation,
                               before_shards, between_shards, before_marker, before_tracker) of <step> (any step
                               when omitted), on global rank <rank> only when given (a single worker dying in a
                               multi-rank job).
DAGRL_FAULT_TRACE=<file>       append "<unix time> <phase> <step>" to <file> at every such point, so a harness that
                               kills the run at a random moment can tell which phase it hit.
DAGRL_HANG=<phase>[:<step>][@<rank>]   sleep forever there instead (a hung rank, for the watchdog); with
DAGRL_HANG_ONCE=<file>         only where <file> does not exist yet (it is created), so a restarted run goes on.
DAGRL_SIGNAL=<phase>[:<step>][@<rank>][=<SIGNAL>],...  send this process SIGTERM (a scheduler's preemption notice)
                               or the named signal there (SIGINT: a Ctrl-C), at each point listed.
DAGRL_DELAY=<phase>:<seconds>  sleep that long at every such point of <phase> (a slow trainer or rollout, so that a test
                               of the asynchronous pools sees the other pool run ahead to its bound).
DAGRL_INJECT_NAN=<s1>,<s2>,... make the actor loss NaN at those steps (the engine must skip and count them).
DAGRL_INJECT_NAN_WEIGHTS=<s>,... write NaN into an actor weight after the update of those steps, as a finite
                               gradient with an absurd LR would (such a state must never be checkpointed).
"""

from __future__ import annotations

import logging
import os
import signal
import time

logger = logging.getLogger(__name__)


def _matches(spec: str, phase: str, step: int) -> bool:
    spec, _, at_rank = spec.partition("@")
    name, _, at_step = spec.partition(":")
    if at_rank and int(at_rank) != int(os.environ.get("DAGRL_GLOBAL_RANK", os.environ.get("RANK", "0"))):
        return False
    return name == phase and (not at_step or int(at_step) == step)


def fault_point(phase: str, step: int) -> None:
    """A named point of the run: progress for the hang watchdog, and where the test faults above fire."""
    from dagrl.utils.watchdog import beat

    beat(phase, step)
    trace = os.environ.get("DAGRL_FAULT_TRACE", "")
    if trace:  # one short append per point: the kernel keeps it even if the process is killed right after
        with open(trace, "a", encoding="utf-8") as out:
            out.write(f"{time.time():.3f} {phase} {step}\n")
    delay = os.environ.get("DAGRL_DELAY", "")
    if delay and delay.rpartition(":")[0] == phase:
        time.sleep(float(delay.rpartition(":")[2]))
    hang, once = os.environ.get("DAGRL_HANG", ""), os.environ.get("DAGRL_HANG_ONCE", "")
    if hang and _matches(hang, phase, step) and not (once and os.path.exists(once)):
        if once:
            open(once, "w").close()
        logger.warning("DAGRL_HANG: this process hangs at %s (step %d)", phase, step)
        while True:
            time.sleep(3600)
    for notice in filter(None, os.environ.get("DAGRL_SIGNAL", "").split(",")):
        point, _, name = notice.partition("=")
        if _matches(point, phase, step):
            logger.warning("DAGRL_SIGNAL: %s to this process at %s (step %d)", name or "SIGTERM", phase, step)
            os.kill(os.getpid(), signal.Signals[name or "SIGTERM"])
    spec = os.environ.get("DAGRL_FAULT", "")
    if spec and _matches(spec, phase, step):
        logger.warning("DAGRL_FAULT: killing this process at %s (step %d)", phase, step)
        os.kill(os.getpid(), 9)


def nan_injected(step: int, variable: str = "DAGRL_INJECT_NAN") -> bool:
    steps = os.environ.get(variable, "")
    return bool(steps) and str(step) in steps.split(",")
