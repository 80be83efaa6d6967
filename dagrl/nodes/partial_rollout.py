"""Colocated partial rollout (`async_training.partial_rollout=true`): the rollout node's long-tail lever when the
actor and the rollout share the GPUs.

Each rank keeps a partial-rollout buffer of prompt groups in flight (its rollout shard). A step adds the prompts the
trainer drew for it, tops the buffer up to `oversample_ratio` x its share of `data.train_batch_size` with further
draws from the sampler (the first step), syncs weights, and submits every unfinished sample through the engine's
request level (a carried sample as its prompt + the prefix sampled so far: its KV is recomputed under the new
weights). It advances the engine until its share of groups has finished, trains on those (the oldest first when
several finish together) and aborts the rest, which wait in the buffer, partial, for the next step. Tokens carry the
weight version that sampled them; a group whose oldest token would be more than `max_staleness` versions behind the
weights the next update starts from is restarted from its prompt (never dropped). The buffer is part of every
checkpoint (`PartialRolloutBuffer.state_dict`: plain lists), so a resumed run continues exactly; with
`oversample_ratio=1` every group finishes every step and nothing is carried.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from dagrl.data.batch import Batch
from dagrl.engine.rollout.interface import Completion, Request, SamplingSpec
from dagrl.engine.rollout.sequences import join_prompt_and_response
from dagrl.nodes.context import StepContext


@dataclass
class Group:
    """One prompt and its n samples: each a finished Completion, a partial one (finish_reason "abort"), or None
    (not started)."""

    uid: str
    position: int  # dataset row: re-read on resume
    prompt_ids: tuple[int, ...]
    seed: int
    limit: int  # its response limit (extra_info.max_response_length): re-derived on resume
    samples: list[Completion | None] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return all(s is not None and s.finish_reason != "abort" for s in self.samples)

    def oldest_version(self) -> int | None:
        # -1: not sampled (a tool's tokens); a multi-turn trajectory's aborted turn counts too
        versions = [
            v
            for s in self.samples
            if s is not None
            for v in (*s.versions, *getattr(getattr(s, "pending", None), "versions", ()))
            if v >= 0
        ]
        return min(versions) if versions else None

    def request(self, sample: int, sampling: SamplingSpec) -> Request:
        done = self.samples[sample]
        if done is not None:  # partial: carry it on
            return done.continuation()
        return self.fresh_request(sample, sampling)

    def fresh_request(self, sample: int, sampling: SamplingSpec) -> Request:
        """Sample `sample` from its prompt (its id and seed are fixed by the group, so a resume rebuilds it)."""
        return Request(
            f"{self.uid}/{sample}", self.prompt_ids, sampling.with_limit(self.limit), seed=self.seed + sample
        )


class PartialRolloutBuffer:
    """A rank's groups in flight between steps (see the module docstring)."""

    def __init__(self, agent: Any = None) -> None:
        self.agent = agent  # the multi-turn loop: samples are its trajectories (dagrl/agent/partial.py)
        self.dropped: list = []  # trajectories restarted for staleness, their tools not yet released
        self.groups: list[Group] = []
        self.reloads = 0  # weight loads in the last run (mid-batch)
        self.rows: dict[str, Batch] = {}  # uid -> the prompt's row (dataset columns), for the trained batch

    def add(self, prompts: Batch, positions: list[int], seed: int, sampling: SamplingSpec) -> None:
        """`sampling`: the prompts' own (their n samples each, their rows' response limits)."""
        ids, mask = prompts["input_ids"], prompts["attention_mask"].bool()
        for row, (uid, position) in enumerate(zip(prompts["uid"], positions)):
            self.groups.append(
                Group(
                    uid,
                    int(position),
                    tuple(ids[row][mask[row]].tolist()),
                    seed=(seed + 7919 * row) & 0x7FFFFFFF,
                    limit=sampling.limit(row),
                    samples=[None] * sampling.n,
                )
            )
            self.rows[uid] = prompts.select([row])

    def restart_stale(self, oldest_allowed: int) -> int:
        """Drop the samples of groups holding a token older than `oldest_allowed`; how many groups restart."""
        restarted = 0
        for group in self.groups:
            oldest = group.oldest_version()
            if oldest is not None and oldest < oldest_allowed:
                if self.agent is not None:
                    self.dropped += [s for s in group.samples if s is not None]
                group.samples = [None] * len(group.samples)
                restarted += 1
        return restarted

    def run(self, engine: Any, sampling: SamplingSpec, wanted: int, updates: Any = None) -> list[Group]:
        """Advance `engine` until `wanted` groups have finished; those groups, oldest first. The rest stay.

        `updates` (the rollout pool of two): after every scheduling step `updates.poll(done)` tells whether every
        rank of the pool is done and whether new weights wait; then every request in flight is aborted, the weights
        are loaded (`updates.load()`) and the partial responses go on under them, so a long response does not hold
        old weights to the end of the batch (AReaL's interruptible rollout). Ranks that are done keep generating
        the carried groups until all are."""
        if self.agent is not None:
            from dagrl.agent.partial import run_groups

            return run_groups(self.agent, self, engine, sampling, wanted, updates)
        by_id: dict[str, tuple[int, int]] = {}

        def record(completions) -> None:
            for completion in completions:
                index, sample = by_id[completion.id]
                self.groups[index].samples[sample] = completion

        def submit() -> None:
            requests = []
            for index, group in enumerate(self.groups):
                for sample, done in enumerate(group.samples):
                    if done is None or done.finish_reason == "abort":
                        request = group.request(sample, sampling)
                        requests.append(request)
                        by_id[request.id] = (index, sample)
            engine.submit(requests)

        submit()
        self.reloads = 0
        while True:
            done = sum(g.finished for g in self.groups) >= wanted or not engine.in_flight()
            if updates is None:
                if done:
                    break
            else:
                everyone, waiting = updates.poll(done)
                if waiting:
                    record(engine.abort())
                    updates.load()
                    self.reloads += 1
                    submit()
                if everyone:
                    break
            if engine.in_flight():
                record(engine.advance())
        record(engine.abort())
        done = [g for g in self.groups if g.finished][:wanted]
        taken = {g.uid for g in done}
        self.groups = [g for g in self.groups if g.uid not in taken]
        return done

    def batch(self, groups: list[Group], response_length: int, eos: list[int], pad: int) -> Batch:
        """The trained rows in the shared layout, with `rollout_log_probs` and each token's `token_versions`."""
        prompts = Batch.concat([self.rows.pop(g.uid).repeat_interleave(len(g.samples)) for g in groups])
        samples = [s for g in groups for s in g.samples]
        responses = torch.full((len(samples), response_length), pad, dtype=torch.long)
        log_probs = torch.zeros(responses.shape, dtype=torch.float32)
        versions = torch.full(responses.shape, -1, dtype=torch.long)
        lengths = torch.tensor([len(s.token_ids) for s in samples], dtype=torch.long)
        for row, sample in enumerate(samples):
            length = len(sample.token_ids)
            responses[row, :length] = torch.tensor(sample.token_ids, dtype=torch.long)
            log_probs[row, :length] = torch.tensor(sample.log_probs, dtype=torch.float32)
            versions[row, :length] = torch.tensor(sample.versions, dtype=torch.long)
        batch = join_prompt_and_response(prompts, responses, response_length, eos, pad, lengths)
        batch["rollout_log_probs"] = log_probs * batch["response_mask"]
        batch["token_versions"] = torch.where(batch["response_mask"].bool(), versions, -1)
        return batch

    def ledger_uid(self, uid: str) -> str | None:
        """The prompt-ledger uid ("<epoch>:<dataset index>") of group `uid`, when its prompt row has one."""
        row = self.rows.get(uid)
        return str(row["ledger_uid"][0]) if row is not None and "ledger_uid" in row else None

    def ledger_uids(self) -> list[str]:
        """The prompt-ledger uids of the groups in flight."""
        return [uid for uid in map(self.ledger_uid, (g.uid for g in self.groups)) if uid is not None]

    # ---- checkpoint -------------------------------------------------------------------------------
    def state_dict(self) -> list[dict]:
        states = []
        for g in self.groups:
            ledger_uid = self.ledger_uid(g.uid)
            states.append(
                {
                    "uid": g.uid,
                    "position": g.position,
                    "seed": g.seed,
                    "samples": [None if s is None else self._sample_state(s) for s in g.samples],
                    **({"ledger_uid": ledger_uid} if ledger_uid is not None else {}),
                }
            )
        return states

    def _sample_state(self, s: Any) -> dict:
        if self.agent is not None:
            from dagrl.agent.partial import state

            return state(s)
        return {
            "tokens": list(s.token_ids),
            "log_probs": list(s.log_probs),
            "versions": list(s.versions),
            "finish": s.finish_reason,
        }

    def load_state_dict(self, state: list[dict], rows: Batch, sampling: SamplingSpec) -> None:
        """`rows`: the dataset rows at the groups' positions, in order (with their uid and ledger_uid columns set);
        `sampling`: theirs, with the rows' response limits."""
        self.groups, self.rows = [], {}
        ids, mask = rows["input_ids"], rows["attention_mask"].bool()
        for row, saved in enumerate(state):
            group = Group(
                saved["uid"], saved["position"], tuple(ids[row][mask[row]].tolist()), saved["seed"], sampling.limit(row)
            )
            for sample, done in enumerate(saved["samples"]):
                if done is not None and "turns" in done:  # a multi-turn trajectory
                    from dagrl.agent.partial import restore

                    group.samples.append(restore(self.agent, done, group, rows.select([row]), sampling, sample))
                    continue
                group.samples.append(
                    None
                    if done is None
                    else Completion(
                        group.fresh_request(sample, sampling),
                        tuple(done["tokens"]),
                        tuple(done["log_probs"]),
                        tuple(done["versions"]),
                        done["finish"],
                    )
                )
            self.groups.append(group)
            self.rows[group.uid] = rows.select([row])


def buffer_target(ctx: StepContext, share: int) -> int:
    """Groups a rank keeps in flight: oversample_ratio x its share of the batch."""
    return math.ceil(ctx.cfg.async_training.oversample_ratio * share)


def staleness_metrics(batch: Batch, version: int) -> dict[str, float]:
    """async/*: how many versions behind `version` (the weights this step's update starts from) each trained
    trajectory's oldest token is, and the fraction sampled under more than one version."""
    versions = batch["token_versions"]
    valid = versions >= 0
    oldest = torch.where(valid, versions, version).min(-1).values
    newest = torch.where(valid, versions, -1).max(-1).values
    staleness = (version - oldest).float()
    return {
        "async/staleness_mean": staleness.mean().item(),
        "async/staleness_max": staleness.max().item(),
        "async/partial_fraction": (newest > oldest).float().mean().item(),
    }
