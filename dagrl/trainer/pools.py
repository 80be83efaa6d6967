"""Separate rollout and training pools (`actor_rollout_ref.hybrid_engine=false`): a placement and a schedule.

The same graph runs, cut at the reshard node: the rollout pool runs the nodes before it (rollout, score, filters)
for batch b = 1, 2, ..., the training pool the rest for step s = b. They meet on the bridge (placement/bridge.py):

- weights: after step s the training pool exports the actor's weights (collective) and its rank 0 sends them,
  labelled version s, to every rollout rank (every `async_training.trigger_parameter_sync_step` steps, at every
  validation step and at the start: version = the step resumed from). A push waits until the previous one was
  received, so at most one is in transit;
- batches: the rollout pool's rank 0 sends batch b (every shard, its metrics, the prompt-ledger view and the rollout
  state after b: sampler and partial-rollout buffers) to the training pool's rank 0, which hands it to every training
  rank. Generating batch b needs weights of version >= b - 1 - K (K = `async_training.max_staleness`): step b's
  update starts from version b - 1, so no trained token is more than K versions behind, and the rollout pool runs at
  most K + 1 batches ahead of training (the admission bound). K = 0 is the colocated schedule, exactly;
- validation runs in the rollout pool on the version pushed after each validation step; the trainer waits for it.

A checkpoint of step s stores the rollout state that came with batch s. A resumed run sends it back and the rollout
pool regenerates batch s + 1 onwards from there: batches generated beyond s before the kill are never trained (they
were not in the ledger), and each prompt is trained exactly once.
"""

from __future__ import annotations

import logging
import pickle
import time
from dataclasses import dataclass, field
from typing import Iterator

import torch

from dagrl.dag.graph import Graph
from dagrl.data.batch import Batch
from dagrl.engine.rollout.interface import WeightBucket
from dagrl.placement.bridge import Bridge
from dagrl.utils import dist

logger = logging.getLogger(__name__)


def split_graph(graph: Graph) -> tuple[Graph, Graph]:
    """(the rollout pool's nodes, the training pool's): before the reshard node, and from it on."""
    cut = graph.reshard
    return Graph(graph.nodes[:cut]), Graph(graph.nodes[cut:])


@dataclass(frozen=True)
class Schedule:
    """Which versions the training pool pushes and validates, known to both pools from the config alone."""

    start: int
    total: int
    trigger: int
    test_freq: int
    validates: bool  # val_files given
    val_before_train: bool
    start_validated: bool | None = None  # a resumed run: whether the run that saved its start step validated it

    def validated(self, version: int) -> bool:
        """Whether the weights after step `version` are validated: every test_freq steps and after the last, and
        before training (val_before_train) unless a resumed run's start step was validated already — as the
        checkpoint says (a finished run that is extended validated its last step under its own total), or, for a
        checkpoint that predates the record, as this schedule would have."""
        if not self.validates:
            return False
        periodic = self.test_freq > 0 and (version % self.test_freq == 0 or version == self.total)
        if version == self.start:
            already = self.start_validated if self.start_validated is not None else self.start > 0 and periodic
            return self.val_before_train and not already
        return periodic

    def pushed(self, version: int) -> bool:
        return version == self.start or version % self.trigger == 0 or self.validated(version)

    @classmethod
    def of(cls, cfg, start: int, total: int, start_validated: bool | None = None) -> "Schedule":
        trainer = cfg.trainer
        return cls(
            start,
            total,
            cfg.async_training.trigger_parameter_sync_step,
            trainer.test_freq,
            bool(cfg.data.val_files),
            bool(trainer.val_before_train),
            start_validated,
        )


# ---- weights on the wire ------------------------------------------------------------------------------------------
def pack_buckets(buckets: Iterator[WeightBucket]) -> tuple[list, list[torch.Tensor]]:
    """Each bucket as one byte tensor on the device its tensors are on, and the header that restores its
    (name, tensor) list."""
    header, flats = [], []
    for bucket in buckets:
        header.append([(name, str(t.dtype).removeprefix("torch."), tuple(t.shape)) for name, t in bucket])
        flats.append(torch.cat([t.detach().contiguous().view(-1).view(torch.uint8) for _, t in bucket]))
    return header, flats


def _pickled(obj) -> torch.Tensor:
    return torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)


def unpack_bucket(entries: list, flat: torch.Tensor) -> WeightBucket:
    bucket, offset = [], 0
    for name, dtype, shape in entries:
        dtype = getattr(torch, dtype)
        nbytes = int(torch.Size(shape).numel()) * torch.empty((), dtype=dtype).element_size()
        bucket.append((name, flat[offset : offset + nbytes].view(dtype).view(shape)))
        offset += nbytes
    return bucket


class WeightInbox:
    """The rollout pool's stand-in for the actor: `export_weights` yields the last version received (once)."""

    def __init__(self) -> None:
        self.buckets: list[WeightBucket] = []

    def put(self, buckets: list[WeightBucket]) -> None:
        self.buckets = buckets

    def export_weights(self, bucket_bytes: int) -> Iterator[WeightBucket]:
        buckets, self.buckets = self.buckets, []  # the rollout holds its own copy from here on
        yield from buckets


# ---- the training pool's side -----------------------------------------------------------------------------------
@dataclass
class Feed:
    """What the training pool gets from the rollout pool and sends back (every training rank holds one)."""

    bridge: Bridge
    leader: bool  # the training pool's rank 0: the one that talks to the rollout pool
    metrics: dict = field(default_factory=dict)

    def start(self, start_step: int, rollout_state: dict | None, validated: bool | None = None) -> None:
        """Tell every rollout rank where to start: the step, the rollout state of the checkpoint (or None) and
        whether the run that saved it validated that step (None: unknown)."""
        if self.leader:
            for rank in self.bridge.rollout_ranks:
                self.bridge.send(rank, "start", {"step": start_step, "state": rollout_state, "validated": validated})

    def push(self, actor, version: int, bucket_bytes: int) -> None:
        """Export the actor's weights (collective over the training pool) and send them as `version`: as CUDA IPC
        handles to a rollout rank on this GPU (nothing copied), broadcast over the weights group to the others
        (NCCL between GPUs), each announced by a header on the bridge."""
        start = time.perf_counter()
        if not self.leader:
            for _ in actor.export_weights(bucket_bytes):
                pass
            return
        header, flats = pack_buckets(actor.export_weights(bucket_bytes))
        waited = self.bridge.flush()  # the previous push first: at most one in transit
        sizes = [flat.numel() for flat in flats]
        for rank in self.bridge.rollout_ranks:
            message = {"version": version, "buckets": header}
            if rank in self.bridge.weights_ranks:
                message["sizes"] = sizes  # the buckets follow over the weights group
            else:
                from torch.multiprocessing.reductions import reduce_tensor

                message["ipc"] = [reduce_tensor(flat) for flat in flats]
            self.bridge.send_tensors(rank, "weights", [_pickled(message)], keep=tuple(flats))
        if self.bridge.weights_group is not None:
            self.bridge.broadcast_weights(flats)
        self.metrics = {
            "timing_s/weight_push": time.perf_counter() - start,
            "timing_s/weight_push_wait": waited,
            "async/push_gb": sum(flat.numel() for flat in flats) / 1e9,
        }

    def take(self, step: int) -> tuple[dict, float]:
        """Batch `step` from the rollout pool on every training rank, and the seconds this rank waited for it."""
        start = time.perf_counter()
        message = None
        if self.leader:
            message = self.bridge.recv(self.bridge.rollout_leader, "data")
            # batches the rollout pool finished beyond this one: the buffer, at most K + 1 batches with this one
            message["metrics"]["async/buffered_batches"] = float(
                self.bridge.available(self.bridge.rollout_leader, "data")
            )
        message = dist.broadcast_object(message)
        if message["step"] != step:
            raise RuntimeError(f"the rollout pool sent batch {message['step']} for step {step}")
        return message, time.perf_counter() - start

    def val(self, step: int) -> dict[str, float]:
        """The rollout pool's validation metrics of the weights after `step` (on the leader; {} elsewhere)."""
        if not self.leader:
            return {}
        message = self.bridge.recv(self.bridge.rollout_leader, "val")
        if message["step"] != step:
            raise RuntimeError(f"the rollout pool validated version {message['step']}, expected {step}")
        return message["metrics"]

    def close(self, stopped: bool = False) -> None:
        """The end: wait until the rollout pool has what was sent, or (`stopped`: preempted) tell it to stop."""
        if self.leader:
            if stopped:
                self.bridge.stop()
            else:
                self.bridge.flush()


def batch_of(message: dict) -> Batch:
    """The step's whole batch from the message's rollout shards, in shard order."""
    return Batch.concat([shard for shard in message["shards"] if shard is not None])
