"""The training pool: the colocated loop (trainer/loop.py) whose batches come from the rollout pool, whose weights
are pushed back to it and whose validation runs there. `Feed` is its link to the rollout pool."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from dagrl.config.shape import RunShape
from dagrl.config.tree import Cfg
from dagrl.data.batch import Batch
from dagrl.placement.bridge import Bridge
from dagrl.trainer.loop import Trainer, step_graph
from dagrl.trainer.partial_state import read_partials
from dagrl.trainer.pools.schedule import Schedule, split_graph
from dagrl.trainer.pools.wire import pack_buckets, pickled
from dagrl.trainer.validation import ValidationCut
from dagrl.utils import dist
from dagrl.utils.preemption import StopRequest
from dagrl.utils.watchdog import beat


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
            self.bridge.send_tensors(rank, "weights", [pickled(message)], keep=tuple(flats))
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

    def val(self, step: int, stop: StopRequest) -> dict[str, float]:
        """The rollout pool's validation metrics of the weights after `step` (on the leader; {} elsewhere); raises
        ValidationCut on every rank where a stop signal cut it. While it waits, the leader announces its own
        SIGTERM/SIGUSR1 to the rollout pool, whose validation stops on it (a Ctrl-C lets it finish)."""
        metrics, cut = {}, False
        if self.leader:
            bridge = self.bridge
            while bridge.available(bridge.rollout_leader, "val") <= 0:
                if stop.signal not in (None, "SIGINT"):
                    stop.announce(bridge.store)
                beat("waiting for val")
                bridge.check_failed()
                time.sleep(bridge.poll_s)
            message = bridge.recv(bridge.rollout_leader, "val")
            if message["step"] != step:
                raise RuntimeError(f"the rollout pool validated version {message['step']}, expected {step}")
            metrics, cut = message["metrics"], message.get("cut", False)
        if dist.broadcast_object(cut):
            raise ValidationCut(step)
        return metrics

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


class TrainingPool(Trainer):
    """The training pool's process: the actor (and reference, critic, teacher), no rollout engine; each step trains
    on the batch the rollout pool generated, with the rollout pool's view of the step in its ledger lines and its
    rollout state (sampler, partial-rollout buffers) in its checkpoint."""

    generates = False

    def __init__(self, cfg: Cfg, shape: RunShape, bridge: Bridge) -> None:
        super().__init__(cfg, shape, split_graph(step_graph(cfg, shape))[1])
        self.feed = Feed(bridge, leader=self.rank == 0)
        self.stop_store = bridge.store  # a stop signal in either pool stops the run (StopRequest.announce)
        self.bucket_bytes = int(cfg.actor_rollout_ref.rollout.update_weights_bucket_megabytes) << 20
        self.message: dict | None = None  # the rollout pool's message of the current step
        self.waited = 0.0  # seconds this rank waited for it
        self.rollout_resume: dict | None = None  # the checkpoint's rollout state, for the rollout pool

    def engines(self) -> dict:
        return self.build_models()  # the rollout pool tells whether the run had finished (nothing_to_do)

    def resume_rollout(self, path: Path, state: dict) -> None:
        """The rollout pool continues from the checkpoint's rollout state: its sampler and every shard's buffer."""
        shards = self.shape.placement.pool("rollout").size // self.shape.rollout_tp
        self.rollout_resume = {"sampler": state["sampler"], "partials": read_partials(path, shards)}

    def nothing_to_do(self, start_step: int) -> None:
        self.feed.start(start_step, None)  # the rollout pool has nothing to do either
        self.feed.close()

    def begin(self, start_step: int) -> None:
        """The rollout pool starts from the resumed state, with the weights training starts from."""
        self.feed.start(start_step, self.rollout_resume, self.start_validated)
        self.feed.push(self.ctx.actor, start_step, self.bucket_bytes)

    def take_batch(self, step: int) -> Batch:
        """The batch the rollout pool generated and scored for this step."""
        self.message, self.waited = self.feed.take(step)
        self.sampler.load_state_dict(self.message["sampler"])  # what this step's checkpoint resumes from
        return batch_of(self.message)

    def step_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        metrics["timing_s/trainer_wait"] = self.waited
        return {**self.message["metrics"], **super().step_metrics(metrics)}

    def trained(self, step: int, schedule: Schedule) -> dict[str, float]:
        """The step's weights to the rollout pool when the schedule pushes them."""
        if not schedule.pushed(step):
            return {}
        self.feed.push(self.ctx.actor, step, self.bucket_bytes)
        return self.feed.metrics

    def validation_metrics(self, step: int) -> dict[str, float]:
        return self.feed.val(step, self.stop)  # validation runs in the rollout pool

    def end(self, stopped: bool) -> None:
        self.feed.close(stopped=stopped)

    def partial_states(self) -> dict[int, list]:
        """Every rollout shard's buffer, as the rollout pool sent them with the step's batch (rank 0 saves them)."""
        partials = self.message["partials"] if self.message is not None and self.rank == 0 else None
        return dict(enumerate(partials)) if partials is not None else {}

    def ledger_views(self, trained: list[str], carried: list[str]) -> list[tuple]:
        """Every training rank's trained prompts, and the rollout pool's view, which came with the batch."""
        message = self.message
        parts = [(uids, [], [], {}) for uids in dist.all_gather_objects(trained)]
        parts.append(([], [*message["carried"], *message["drawn"]], message["in_flight"], message["dropped"]))
        return parts

    def in_flight_uids(self) -> list[str]:
        return list(self.message["in_flight"]) if self.message is not None else []
