"""Two pools in one launch: each pool's own default process group, and the bridge between the pools.

torchrun (or Ray) starts rollout + train processes. Every one of them joins the launch's store, then initialises a
default process group over its own pool only, under pool-local RANK / WORLD_SIZE / LOCAL_RANK (vLLM's external
launcher and Megatron's `initialize_model_parallel` both span the whole default group: a shared world would hang
one of them). The bridge is a second gloo group over every process of the launch, never a default one, plus the
launch's store as its control plane:

- a message is pickled, sent point to point on a channel's gloo tag (gloo keeps each (pair, tag) in order), and then
  announced by bumping a counter in the store; a receiver first waits for the announcement while watching for a
  failure, then receives. So no process ever blocks inside gloo on a peer that has died or stopped on an error;
- sends are asynchronous: the sender keeps the buffers alive until the receiver acknowledges them in the store;
- a process that stops on an error records it (`fail`) and every waiting peer raises it (`PoolStopped`);
- every process bumps its liveness counter in the store each second. A process killed outright records nothing, and
  torchrun then sends the survivors SIGTERM, which they take for a preemption notice: finish the step, checkpoint.
  Waiting for a dead peer, a survivor that got a stop signal checks the counters and stops once one has stood still
  for `DEAD_AFTER_S` (instead of sitting out torchrun's 30 s before its SIGKILL, which delayed every restart).
Weights: the training pool's rank 0 announces each push on the bridge (a header: names, shapes, bucket sizes), then
broadcasts the buckets over a third group, of itself and the rollout ranks on other GPUs (`weights_group`: NCCL
device to device on GPUs, gloo on CPU), or hands CUDA IPC handles to a rollout rank on its own GPU (`_shares_device`;
NCCL cannot put one GPU in a group twice). Receivers acknowledge once loaded, so the buffers live until then.
"""

from __future__ import annotations

import datetime
import logging
import os
import pickle
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from dagrl.config.errors import RunError
from dagrl.placement.pools import Placement, Pool
from dagrl.utils.watchdog import beat

logger = logging.getLogger(__name__)

CHANNELS = {"start": 1, "data": 2, "val": 3, "weights": 4}
FAILED_KEY = "dagrl/failed"
STOPPED_KEY = "dagrl/stopped"
FINISHED_KEY = "dagrl/finished"  # processes of the launch at the end of a run (Bridge.finish)
READY_KEY = "dagrl/weights/ready"  # receivers that joined a weight broadcast, over all pushes
GLOBAL_RANK = "DAGRL_GLOBAL_RANK"
ALIVE_KEY = "dagrl/alive/{}"  # a process's liveness counter
ALIVE_S = 1.0  # how often each process bumps it
DEAD_AFTER_S = 5.0  # after a stop signal, a peer whose counter stood still this long is taken for dead


class PoolStopped(RunError):
    """The other pool stopped on an error (its one-line message is ours)."""


class PoolDone(Exception):
    """The training pool stopped early on purpose (preemption): the rollout pool ends too, without an error."""


def global_rank() -> int:
    """This process's rank in the whole launch (RANK before `init_pools` made it pool-local)."""
    return int(os.environ.get(GLOBAL_RANK, os.environ.get("RANK", "0")))


@dataclass
class Bridge:
    store: Any  # the launch's store (the control plane)
    group: Any  # gloo group of every process of the launch
    placement: Placement
    rank: int  # global rank
    poll_s: float = 0.005
    pending: list = field(default_factory=list)  # (work, buffer) of sends not yet known delivered
    received: dict = field(default_factory=dict)  # (channel, src) -> messages received so far
    weights_group: Any = None  # the training pool's rank 0 and the rollout ranks on other devices (or None)
    weights_ranks: tuple = ()  # their global ranks, the sender first
    broadcasts: int = 0  # pushes broadcast so far (the sender)
    sender: Any = None  # the thread of the broadcast in progress (the sender)
    broadcast_error: BaseException | None = None
    stop_signal: Any = None  # () -> the stop signal this process got (SIGTERM, SIGUSR1) or None
    peers_seen: dict = field(default_factory=dict)  # rank -> (its liveness count, when it last changed)
    peers_checked: float = 0.0
    alive: Any = None  # (the liveness thread, the event that stops it)

    def keep_alive(self) -> None:
        """Bump this process's liveness counter every ALIVE_S from a daemon thread, until `close`."""
        stopped = threading.Event()

        def run() -> None:
            key = ALIVE_KEY.format(self.rank)
            while not stopped.is_set():
                try:
                    self.store.add(key, 1)
                except Exception as error:  # the launch's store went away: the launch is over, so is this process
                    logger.warning("liveness counter stopped: the launch's store is gone (%s)", error)
                    return
                stopped.wait(ALIVE_S)

        self.alive = (threading.Thread(target=run, name="dagrl-alive", daemon=True), stopped)
        self.alive[0].start()

    def close(self) -> None:
        """The process's part is over: the liveness thread ends, joined, so that it is not inside a store call while
        the interpreter shuts down (that aborts the process: "terminate called without an active exception")."""
        if self.alive is not None:
            thread, stopped = self.alive
            stopped.set()
            thread.join(timeout=5)
            self.alive = None

    @property
    def pool(self) -> Pool:
        return self.placement.pool_of(self.rank)

    @property
    def train_leader(self) -> int:
        return self.placement.pool("train").first_rank

    @property
    def rollout_ranks(self) -> range:
        return self.placement.pool("rollout").ranks

    @property
    def rollout_leader(self) -> int:
        return self.placement.pool("rollout").first_rank

    def _key(self, channel: str, src: int, dst: int) -> str:
        return f"dagrl/chan/{channel}/{src}->{dst}"

    # ---- messages -----------------------------------------------------------------------------------------
    def send(self, dst: int, channel: str, obj: Any) -> None:
        """Post `obj` to global rank `dst` on `channel` without waiting."""
        payload = torch.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), dtype=torch.uint8)
        self.send_tensors(dst, channel, [payload])

    def send_tensors(self, dst: int, channel: str, tensors: list[torch.Tensor], keep: tuple = ()) -> None:
        """Post host tensors whose sizes the receiver learns from a header, then announce them. `keep`: objects to
        hold until the receiver acknowledges (the GPU memory behind CUDA IPC handles in the message)."""
        tag = CHANNELS[channel] * 2
        sizes = torch.tensor([t.numel() * t.element_size() for t in tensors], dtype=torch.int64)
        count = torch.tensor([len(tensors)], dtype=torch.int64)
        buffers = [(count, 0), (sizes, 0), *((_bytes(t), 1) for t in tensors)]
        works = [self.group.send([buffer], dst, tag + offset) for buffer, offset in buffers]
        key = self._key(channel, self.rank, dst)
        sequence = self.store.add(key, 1)
        self.pending.append((key, sequence, works, (buffers, keep)))
        self._reap()

    def recv(self, src: int, channel: str) -> Any:
        """The next object `src` sent on `channel` (waits for it; raises PoolStopped if a process failed)."""
        (payload,) = self.recv_tensors(src, channel)
        return pickle.loads(payload.numpy().tobytes())

    def recv_tensors(self, src: int, channel: str, ack: bool = True) -> list[torch.Tensor]:
        """The next tensors (as bytes) `src` sent on `channel`. `ack=False`: the sender keeps its buffers until
        `ack` is called (a CUDA IPC message's memory must outlive the receiver's use of it)."""
        self.wait_for(src, channel)
        tag = CHANNELS[channel] * 2
        count = torch.empty(1, dtype=torch.int64)
        self.group.recv([count], src, tag).wait()
        sizes = torch.empty(int(count[0]), dtype=torch.int64)
        self.group.recv([sizes], src, tag).wait()
        out = []
        for size in sizes.tolist():
            buffer = torch.empty(size, dtype=torch.uint8)
            self.group.recv([buffer], src, tag + 1).wait()
            out.append(buffer)
        self.received[(channel, src)] = self.received.get((channel, src), 0) + 1
        if ack:
            self.ack(src, channel)
        return out

    def ack(self, src: int, channel: str) -> None:
        """Tell `src` the message received last on `channel` is done with: its buffers may go."""
        self.store.add(self._key(channel, src, self.rank) + "/acked", 1)

    def _broadcast(self, flats: list[torch.Tensor]) -> None:
        for flat in flats:
            options = dist.BroadcastOptions()
            options.rootRank, options.rootTensor = 0, 0
            self.weights_group.broadcast([flat], options).wait()

    def broadcast_weights(self, flats: list[torch.Tensor]) -> None:
        """The sender: broadcast `flats` over the weights group once every receiver has said it is ready, from a
        thread, so the trainer goes on meanwhile and no collective waits a whole batch for its peers (NCCL's
        timeout). `flush` joins it. The header announcing these buckets was sent before."""
        self.join_weights()
        self.broadcasts += 1
        expected = self.broadcasts * (len(self.weights_ranks) - 1)

        def post() -> None:
            try:
                if flats[0].is_cuda:
                    torch.cuda.set_device(flats[0].device)  # the current device is per thread
                while self.store.add(READY_KEY, 0) < expected:
                    time.sleep(self.poll_s)
                self._broadcast(flats)
            except BaseException as error:  # raised again in the main thread by join_weights
                self.broadcast_error = error

        self.sender = threading.Thread(target=post, name="dagrl-weights", daemon=True)
        self.sender.start()

    def join_weights(self) -> None:
        """Wait for the last broadcast to be sent (its receivers acknowledged it, or failed: see `flush`)."""
        if self.sender is not None:
            while self.sender.is_alive():  # polled: a receiver killed outright must not hold this process here
                self.sender.join(timeout=0.1)
                self.check_peers_alive()
            self.sender = None
        if self.broadcast_error is not None:
            raise RuntimeError(f"weight broadcast failed: {self.broadcast_error}") from self.broadcast_error

    def receive_weights(self, sizes: list[int], device: torch.device) -> list[torch.Tensor]:
        """A receiver: the buckets of the push whose header it just read, `sizes` bytes each, on `device`."""
        flats = [torch.empty(size, dtype=torch.uint8, device=device) for size in sizes]
        self.store.add(READY_KEY, 1)
        self._broadcast(flats)
        return flats

    def available(self, src: int, channel: str) -> int:
        """Messages `src` has announced on `channel` that this process has not received yet."""
        return self.store.add(self._key(channel, src, self.rank), 0) - self.received.get((channel, src), 0)

    def wait_for(self, src: int, channel: str) -> float:
        """Wait until `src` announced a message on `channel`; the seconds waited."""
        start = time.perf_counter()
        while self.available(src, channel) <= 0:
            beat(f"waiting for {channel}")  # within the staleness bound, waiting is progress
            self.check_failed()
            time.sleep(self.poll_s)
        return time.perf_counter() - start

    def _delivered(self, key: str, sequence: int) -> bool:
        return self.store.add(key + "/acked", 0) >= sequence

    def _reap(self) -> None:
        """Release the buffers of messages the receiver acknowledged (gloo's send work does not report completion
        before `wait`, so the receiver's acknowledgement in the store says when waiting cannot block)."""
        keep = []
        for key, sequence, works, buffers in self.pending:
            if self._delivered(key, sequence):
                for work in works:
                    work.wait()
            else:
                keep.append((key, sequence, works, buffers))
        self.pending = keep

    def flush(self) -> float:
        """Wait until every message this process sent has been received; the seconds waited."""
        start = time.perf_counter()
        for key, sequence, works, _ in self.pending:
            while not self._delivered(key, sequence):
                beat("waiting for delivery")
                self.check_failed()
                time.sleep(self.poll_s)
            for work in works:
                work.wait()
        self.pending = []
        self.join_weights()  # every receiver acknowledged: the broadcast has ended
        return time.perf_counter() - start

    # ---- failures ----------------------------------------------------------------------------------------------
    def fail(self, message: str) -> None:
        """Tell every process of the launch that this one stopped (the first failure wins)."""
        if not self.store.check([FAILED_KEY]):
            self.store.set(FAILED_KEY, f"the {self.pool.name} pool (rank {self.rank}) stopped: {message}")

    def stop(self) -> None:
        """Tell the rollout pool to end now (the run stopped early on purpose)."""
        self.store.set(STOPPED_KEY, "1")

    def finish(self) -> bool:
        """The end of this process's part of a run, its sends flushed: wait in the store until every process of the
        launch got here, so that none frees its process groups while another still uses them (a pool that freed its
        groups first broke the other's last send: "Broken pipe"). False when the training pool stopped the run early
        (preempted: the rollout pool's last batch may be in flight, so the groups stay as they are to the end)."""
        self.store.add(FINISHED_KEY, 1)
        try:
            while self.store.add(FINISHED_KEY, 0) < self.placement.world_size:
                self.check_failed()
                beat("waiting for the other pool to finish")
                time.sleep(0.05)
        except PoolDone:
            return False
        return not self.store.check([STOPPED_KEY])  # stopped as the last process arrived

    def release(self) -> None:
        """Drop the bridge's own process groups (after `finish`): freed, their gloo threads end with them; and the
        stop-signal callback, which may hold the trainer and so the groups of its engines."""
        self.group = self.weights_group = self.stop_signal = None

    def check_failed(self) -> None:
        if self.store.check([FAILED_KEY]):
            raise PoolStopped(self.store.get(FAILED_KEY).decode())
        if self.store.check([STOPPED_KEY]):
            raise PoolDone()
        self.check_peers_alive()

    def check_peers_alive(self) -> None:
        """Raise PoolStopped if a process of the launch has not bumped its liveness counter for DEAD_AFTER_S (checked
        at most once a second, only after this process got a stop signal: see the module doc)."""
        signal = self.stop_signal() if self.stop_signal is not None else None
        now = time.monotonic()
        if signal is None or now - self.peers_checked < ALIVE_S:
            return
        self.peers_checked = now
        for rank in range(self.placement.world_size):
            if rank == self.rank:
                continue
            count = self.store.add(ALIVE_KEY.format(rank), 0)
            seen = self.peers_seen.get(rank)
            if seen is None or seen[0] != count:
                self.peers_seen[rank] = (count, now)
            elif now - seen[1] >= DEAD_AFTER_S:
                raise PoolStopped(
                    f"launch rank {rank} (the {self.placement.pool_of(rank).name} pool) stopped answering "
                    f"{now - seen[1]:.0f} s after this process got {signal}: it was killed (or is stuck), so this "
                    f"step cannot finish; stopping without a checkpoint (the newest complete one stands, and a restart "
                    f"resumes from it)"
                )


def _shares_device(store, rank: int, other: int) -> bool:
    """Whether two global ranks run on one GPU (same host, same device): CUDA IPC can carry tensors."""
    mine, theirs = (store.get(f"dagrl/device/{r}").decode() for r in (rank, other))
    return mine == theirs and mine != "cpu"


def _weights_group(store, placement: Placement, rank: int, backend: str, timeout: datetime.timedelta):
    """The group the weights are broadcast over: the training pool's rank 0 and every rollout rank not on its GPU
    (those take CUDA IPC handles). Every process knows every device first, so all agree on who is in it."""
    store.wait([f"dagrl/device/{r}" for r in range(placement.world_size)], timeout)
    sender = placement.pool("train").first_rank
    ranks = (sender, *(r for r in placement.pool("rollout").ranks if not _shares_device(store, sender, r)))
    if rank not in ranks or len(ranks) < 2:
        return None, ranks
    prefix = dist.PrefixStore("dagrl/weights", store)
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(prefix, ranks.index(rank), len(ranks), options), ranks
    return dist.ProcessGroupGloo(prefix, ranks.index(rank), len(ranks), timeout), ranks


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    flat = tensor.detach().contiguous().view(-1)
    return flat.view(torch.uint8) if flat.dtype != torch.uint8 else flat


def init_pools(placement: Placement, timeout_s: float = 1800.0) -> Bridge:
    """Join the launch's store, initialise this process's pool as the default process group (pool-local RANK,
    WORLD_SIZE, LOCAL_RANK in the environment from here on) and the bridge over every process."""
    rank = global_rank()
    os.environ[GLOBAL_RANK] = str(rank)
    from dagrl.utils.dist import launch_store

    store, _, world = launch_store(datetime.timedelta(seconds=timeout_s))
    if world != placement.world_size:
        raise RuntimeError(f"launch of {world} processes, placement of {placement.world_size}")
    pool = placement.pool_of(rank)
    device = int(os.environ.get("LOCAL_RANK", "0"))  # the node's device of this process, not its pool's index
    os.environ.update({**pool.local_env(rank), "DAGRL_DEVICE": str(device)})
    backend = "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(device % torch.cuda.device_count())
        backend = "nccl"
    timeout = datetime.timedelta(seconds=timeout_s)
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(f"dagrl/pool/{pool.name}", store),
        rank=rank - pool.first_rank,
        world_size=pool.size,
        timeout=timeout,
    )
    group = dist.ProcessGroupGloo(dist.PrefixStore("dagrl/bridge", store), rank, world, timeout)
    where = "cpu"
    if backend == "nccl":
        import socket

        where = f"{socket.gethostname()}/{torch.cuda.get_device_properties(torch.cuda.current_device()).uuid}"
    store.set(f"dagrl/device/{rank}", where)
    weights_group, weights_ranks = _weights_group(store, placement, rank, backend, timeout)
    from dagrl.utils import watchdog

    watchdog.attach(store)
    logger.info(
        "%s pool rank %d of %d (launch rank %d of %d)", pool.name, rank - pool.first_rank, pool.size, rank, world
    )
    bridge = Bridge(store, group, placement, rank, weights_group=weights_group, weights_ranks=weights_ranks)
    bridge.keep_alive()
    return bridge
