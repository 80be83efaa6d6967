"""The rollout pool: receive weights, validate (cut short by a stop signal, as in a colocated run), generate and
score batch after batch, send each to the training pool (the schedule is in schedule.py). Every rank of the pool
runs it in lockstep: the nodes it runs hold collectives over the pool (dynamic sampling's counts, the metric means,
validation's records)."""

from __future__ import annotations

import logging
import pickle
import time

import torch

from dagrl.config.shape import RunShape
from dagrl.config.tree import Cfg
from dagrl.dag.graph import run_graph
from dagrl.data.batch import Batch
from dagrl.placement.bridge import Bridge, PoolDone
from dagrl.trainer.loop import step_graph
from dagrl.trainer.partial_state import restore_partial
from dagrl.trainer.pools.schedule import Schedule, split_graph
from dagrl.trainer.pools.wire import WeightInbox, unpack_bucket
from dagrl.trainer.runner import StepRunner
from dagrl.trainer.timing import Timer, node_timer
from dagrl.trainer.validation import ValidationCut
from dagrl.utils import dist, watchdog
from dagrl.utils.faults import fault_point

logger = logging.getLogger(__name__)


class Receiver:
    """Takes the training pool's weight pushes in order, and validates the versions the schedule says."""

    def __init__(self, pool: "RolloutPool", schedule: Schedule) -> None:
        self.pool, self.bridge, self.schedule = pool, pool.bridge, schedule
        self.version = -1
        self.validation_s = 0.0
        self.sync_metrics: dict[str, float] = {}  # of the last load, reported with the next batch

    def receive(self) -> None:
        """The next push (waits for it), loaded into the rollout at once: between batches nothing is in flight.
        Acknowledged only then, so CUDA IPC memory stays valid while it is read."""
        from dagrl.nodes.common import sync_weights

        leader = self.bridge.train_leader
        (meta,) = self.bridge.recv_tensors(leader, "weights", ack=False)
        header = pickle.loads(meta.numpy().tobytes())
        if "ipc" in header:  # handles to the trainer's GPU memory
            flats = [rebuild(*args) for rebuild, args in header["ipc"]]
        else:  # broadcast over the weights group, straight onto this rank's device
            device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
            flats = self.bridge.receive_weights(header["sizes"], device)
        version = header["version"]
        ctx = self.pool.ctx
        ctx.actor.put([unpack_bucket(entries, flat) for entries, flat in zip(header["buckets"], flats)])
        ctx.versions.actor = self.version = version
        self.sync_metrics = sync_weights(ctx)
        del flats
        self.bridge.ack(leader, "weights")
        if self.schedule.validated(version):
            start = time.perf_counter()
            try:
                metrics, cut = self.pool.validate(version), False
            except ValidationCut:  # a stop signal: the training pool saves at once, the weights validated on resume
                metrics, cut = {}, True
            self.validation_s += time.perf_counter() - start
            if dist.rank() == 0:
                self.bridge.send(leader, "val", {"step": version, "metrics": metrics, "cut": cut})

    def poll(self, done: bool) -> tuple[bool, bool]:
        """Partial rollout, between two scheduling steps: (every rank of the pool is done, a push waits that can be
        loaded now), agreed in one small collective so every rank takes it at the same step (the weights come by
        a collective). A push whose version is validated waits for the batch's end: validation needs the engine."""
        fault_point("rollout_poll", self.version)  # DAGRL_DELAY=rollout_poll:s: a slow decode, for the tests
        waiting = False
        if dist.rank() == 0 and self.bridge.available(self.bridge.train_leader, "weights") > 0:
            pushed = self.schedule.pushed
            waiting = not self.schedule.validated(
                next(v for v in range(self.version + 1, self.schedule.total + 1) if pushed(v))
            )
        flags = dist.global_max(torch.tensor([float(not done), float(waiting)]))
        return bool(flags[0] == 0), bool(flags[1])

    def load(self) -> None:
        """The push `poll` found, loaded now (every request was aborted first)."""
        self.receive()

    def take(self, required: int) -> float:
        """Every push already announced (the pool agrees on how many), then wait for `required` if still older;
        the seconds spent waiting (validation excluded)."""
        start, validation = time.perf_counter(), self.validation_s
        announced = self.bridge.available(self.bridge.train_leader, "weights") if dist.rank() == 0 else None
        for _ in range(dist.broadcast_object(announced)):
            self.receive()
        while self.version < required:
            self.receive()
        return time.perf_counter() - start - (self.validation_s - validation)

    def finish(self) -> None:
        """The pushes after the last batch (validation of the final steps); each must be received."""
        schedule = self.schedule
        last = max(v for v in range(schedule.start, schedule.total + 1) if schedule.pushed(v))
        while self.version < last:
            self.receive()


class RolloutPool(StepRunner):
    """The rollout pool's process: the rollout engine, on GPUs of its own (never put to sleep), loaded with the
    weights the training pool pushes (a `WeightInbox` in the actor's place); no model and no checkpoint."""

    def __init__(self, cfg: Cfg, shape: RunShape, bridge: Bridge) -> None:
        super().__init__(cfg, shape, split_graph(step_graph(cfg, shape))[0])
        self.bridge = bridge

    def engines(self) -> dict:
        rollout = self.start_rollout()
        rollout.colocated = False  # the weights come from the training pool: nothing to offload, no sleep
        return {"actor": WeightInbox(), "rollout": rollout}

    def validation_stopped(self) -> bool:
        """A scheduler's stop (SIGTERM/SIGUSR1) in either pool cuts the validation under way, as in a colocated run
        (collective over this pool): this pool's own signal goes to the training pool through the store first, and
        the training pool's comes the same way (Feed.val announces it while it waits for the metrics)."""
        self.stop.announce(self.bridge.store)
        return self.stop.agreed(self.bridge.store) not in (None, "SIGINT")

    def restore(self, state: dict) -> None:
        """The sampler and this shard's partial-rollout buffer the training pool resumed with."""
        self.sampler.load_state_dict(state["sampler"])
        if self.ctx.partial is not None and state["partials"] is not None:
            restore_partial(self.ctx, self.train_data, state["partials"][self.rollout_dp_rank])

    def serve(self) -> None:
        """Run until the training pool's last step has its batch (and its validation), or the training pool
        stopped early (preemption)."""
        try:
            self._serve()
        except PoolDone:
            logger.info("rollout pool: the training pool stopped early; stopping too")

    def _serve(self) -> None:
        cfg, bridge = self.cfg, self.bridge
        start = bridge.recv(bridge.train_leader, "start")
        if start["step"] >= self.total_steps:  # the run had finished
            return
        if start["state"] is not None:
            self.restore(start["state"])
        schedule = Schedule.of(cfg, start["step"], self.total_steps, start.get("validated"))
        staleness = cfg.async_training.max_staleness
        receiver = Receiver(self, schedule)
        receiver.receive()  # the weights the training pool starts from
        if cfg.async_training.partial_rollout:  # newer weights reach the requests in flight, not only the next batch
            self.ctx.weight_updates = receiver
        watchdog.started()
        stop = self.stop  # a stop signal here reaches the training pool through the store; it decides when
        stop.keeps_work = True  # so a first Ctrl-C waits for the training pool's step boundary too
        logger.info("rollout pool: batches %d..%d, staleness bound %d", start["step"] + 1, self.total_steps, staleness)
        for step in range(start["step"] + 1, self.total_steps + 1):
            # step's update starts from version step - 1: its samples may be at most K versions older
            stop.announce(bridge.store)
            pause = receiver.take(step - 1 - staleness)
            extra = {"timing_s/rollout_pause": pause, **receiver.sync_metrics}
            message = self.profiler.run(step, lambda step: self.generate(step, extra))  # global_profiler.*
            receiver.sync_metrics = {}
            if dist.rank() == 0:
                bridge.send(bridge.train_leader, "data", message)
        receiver.finish()
        bridge.flush()

    def generate(self, step: int, extra: dict[str, float]) -> dict | None:
        """Batch `step`: the rollout-side nodes on this rank's prompts; on the pool's rank 0, the message with every
        shard, the pool's mean metrics, the prompt-ledger view and the rollout state after this batch."""
        ctx = self.ctx
        ctx.step, ctx.update_base = step, step - 1
        ctx.dropped, self.drawn = {}, []
        carried = ctx.partial.ledger_uids() if ctx.partial is not None else []
        timer = Timer()
        start = time.perf_counter()
        batch, metrics = run_graph(self.graph, ctx, self.local_prompts(step), timer=node_timer(timer, step))
        seconds = time.perf_counter() - start
        if "token_versions" not in batch and len(batch):  # sampled at once: every token by the version loaded
            mask = batch["response_mask"].bool()
            batch["token_versions"] = torch.where(mask, ctx.versions.rollout, -1)
        generated = float(batch["response_mask"].sum()) if len(batch) else 0.0
        metrics.update({f"timing_s/{name}": value for name, value in timer.seconds.items()})
        metrics.update(
            {
                **extra,
                "timing_s/rollout_batch": seconds,
                "perf/rollout_throughput": generated / max(timer.seconds.get("gen", seconds), 1e-9),
            }
        )
        metrics = dist.mean_over_ranks(metrics)
        layout = self.shape.layout
        leads = layout.is_rollout_tp_leader(ctx.rank)
        in_flight = ctx.partial.ledger_uids() if ctx.partial is not None else []
        part = (
            batch.to("cpu") if leads else None,
            ctx.partial.state_dict() if leads and ctx.partial is not None else None,
            self.drawn,
            carried,
            in_flight,
            ctx.dropped,
        )
        parts = [p for rank, p in enumerate(dist.all_gather_objects(part)) if layout.is_rollout_tp_leader(rank)]
        if dist.rank() != 0:
            return None
        from dagrl.nodes.partial_rollout import staleness_metrics

        whole = Batch.concat([p[0] for p in parts])
        metrics.update(staleness_metrics(whole, step - 1))  # over every trajectory of the step, not a mean of ranks'
        unique = lambda index: list(dict.fromkeys(uid for p in parts for uid in p[index]))  # noqa: E731 - a short local helper
        return {
            "step": step,
            "shards": [p[0] for p in parts],
            "metrics": metrics,
            "sampler": self.sampler.state_dict(),
            "partials": [p[1] for p in parts] if ctx.partial is not None else None,
            "drawn": unique(2),
            "carried": unique(3),
            "in_flight": unique(4),
            "dropped": {uid: reason for p in parts for uid, reason in p[5].items()},
        }
