"""Multi-turn trajectories under partial rollout (`multi_turn.enable` with `async_training.partial_rollout`).

A partial-rollout group's samples are then the agent loop's trajectories. The buffer's run drives them with the
loop's own turn driver (`AgentLoop.drive`) until the rank's share of groups has finished every trajectory; the rest
stop where they are: a turn in progress is kept as sampled so far (its next request continues it under the
weights of the next step, KV recomputed), calls under way answer first. A carried trajectory is plain data
(`state`/`restore`), saved in every checkpoint with the buffer. Tool instances are not: a resumed trajectory creates
its tools' instances again with the row's `create_kwargs`, so state a tool built up in `execute` before the
checkpoint is not there after it (stateless tools, such as the shipped ones, resume exactly); an interaction is
started again under a new instance id.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from dagrl.agent.loop import AgentLoop, Trajectory
from dagrl.data.batch import Batch
from dagrl.engine.rollout.interface import Completion, SamplingSpec

# Trajectory fields saved as they are (plain values); the rest are rebuilt from the group and its prompt row.
_SAVED = (
    "messages",
    "ids",
    "mask",
    "log_probs",
    "versions",
    "done",
    "assistant_turns",
    "user_turns",
    "tool_calls",
    "valid_calls",
    "tool_errors",
    "tool_timeouts",
    "truncated",
    "turn_scores",
    "tool_rewards",
    "last_text",
    "last_eos",
)


def start_groups(agent: AgentLoop, buffer: Any, sampling: SamplingSpec) -> None:
    """Trajectories for the buffer's groups that have none yet (new, or restarted for staleness); the dropped ones'
    tools are released first."""
    if buffer.dropped:
        agent._run([agent._finish(t) for t in buffer.dropped])
        buffer.dropped = []
    for group in buffer.groups:
        if all(s is None for s in group.samples):
            own = dataclasses.replace(sampling.with_limit(group.limit), n=len(group.samples))
            fresh = agent._start(buffer.rows[group.uid], own, group.seed)
            for t in fresh:
                t.key = group.uid
            group.samples = fresh


def run_groups(
    agent: AgentLoop, buffer: Any, engine: Any, sampling: SamplingSpec, wanted: int, updates: Any = None
) -> list:
    """PartialRolloutBuffer.run for multi-turn groups: the first `wanted` groups whose every trajectory finished,
    oldest first (their tools released); the rest stay in the buffer."""
    agent.eos_token_ids = set(engine.eos_token_ids)
    start_groups(agent, buffer, sampling)
    agent.tool_wait = 0.0
    trajectories = [t for group in buffer.groups for t in group.samples]
    buffer.reloads = agent.drive(
        engine, trajectories, sampling, enough=lambda: sum(g.finished for g in buffer.groups) >= wanted, updates=updates
    )
    done = [g for g in buffer.groups if g.finished][:wanted]
    agent._run([agent._finish(t) for group in done for t in group.samples])
    taken = {g.uid for g in done}
    buffer.groups = [g for g in buffer.groups if g.uid not in taken]
    return done


def batch_of(agent: AgentLoop, buffer: Any, groups: list, response_length: int) -> tuple[Batch, dict[str, float]]:
    """The trained rows of finished multi-turn `groups` (the loop's layout, plus each token's `token_versions`)
    and the multi-turn metrics of their trajectories."""
    rows = Batch.concat([buffer.rows.pop(g.uid) for g in groups])
    trajectories = [t for g in groups for t in g.samples]
    batch = agent._batch(rows, trajectories, len(groups[0].samples), response_length)
    versions = torch.full(batch["responses"].shape, -1, dtype=torch.long)
    for row, t in enumerate(trajectories):
        versions[row, : len(t.versions)] = torch.tensor(t.versions, dtype=torch.long)
    batch["token_versions"] = torch.where(batch["response_mask"].bool(), versions, -1)
    return batch, {**agent._metrics(trajectories), "timing_s/tool_wait": agent.tool_wait}


def state(t: Trajectory) -> dict:
    """A carried trajectory as plain data (checkpoints load with weights_only=True)."""
    saved = {name: getattr(t, name) for name in _SAVED}
    if t.pending is not None:
        saved["pending"] = {
            "tokens": list(t.pending.token_ids),
            "log_probs": list(t.pending.log_probs),
            "versions": list(t.pending.versions),
        }
    return {"turns": saved}


def restore(agent: AgentLoop, saved: dict, group: Any, row: Batch, sampling: SamplingSpec, sample: int) -> Trajectory:
    """The trajectory `state` saved, for sample `sample` of `group` (its prompt row `row`)."""
    (t,) = agent._start(row, dataclasses.replace(sampling.with_limit(group.limit), n=1), group.seed)
    t.sample, t.seed, t.key = sample, (group.seed + sample) & 0x7FFFFFFF, group.uid
    for name in _SAVED:
        setattr(t, name, saved["turns"][name])
    pending = saved["turns"].get("pending")
    if pending is not None:
        t.pending = Completion(
            t.turn_request(sampling),
            tuple(pending["tokens"]),
            tuple(pending["log_probs"]),
            tuple(pending["versions"]),
            "abort",
        )
    return t
