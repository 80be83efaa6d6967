"""trainer.launcher=ray: one worker process per GPU (per CPU slot on a CPU run), placed by Ray.

The driver (the `python3 -m dagrl.main_dag` process) has already validated the config. It joins a Ray cluster
(`trainer.ray_address`; "auto" when trainer.nnodes > 1, else a local one it starts), reserves one placement group
per node with `trainer.n_gpus_per_node` bundles (STRICT_PACK, so a node's ranks share a machine) — with separate
pools (actor_rollout_ref.hybrid_engine=false) the rollout pool's nodes first, each pool its own placement groups —
starts one worker actor per bundle and gives each the torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR/PORT; launch-wide ranks with separate pools, which split them themselves: placement/bridge.py).
Workers then rendezvous through torch.distributed (NCCL on GPU, gloo on CPU) and run exactly what a torchrun rank
runs. The driver only watches: the first worker to fail or die ends the job — every other
worker is killed (so nobody waits on a dead gloo/NCCL peer) and the driver exits non-zero naming that rank.

Ctrl-C reaches the driver only (Ray starts each worker in a session of its own, SIGINT blocked). The driver passes
the first one on to every worker, on its node, as torchrun does: the workers stop after the same step with a
checkpoint and the driver exits 130 with their line. A second Ctrl-C kills the workers at once. A scheduler's
SIGTERM/SIGUSR1 to the driver is passed on alike, and the driver exits 0 (driver_signals.py).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from typing import Any

from dagrl.launch.driver_signals import DriverSignals, Stopped, forward
from dagrl.utils.preemption import INTERRUPTED, StopBeforeStart, install_start_handlers

logger = logging.getLogger(__name__)

PLACEMENT_TIMEOUT_S = 120.0


DEATH_GRACE_S = 3.0  # a killed rank's peers fail on the broken connection before Ray reports the death itself
RAY_CONNECT_TIMEOUT_S = 5.0  # a Ray head answers a TCP connect in milliseconds; ray.init retries one for minutes


def check_ray_address(address: str | None, timeout_s: float = RAY_CONNECT_TIMEOUT_S, nnodes: int = 1) -> None:
    """trainer.ray_address as host:port or ray://host:port: something accepts a TCP connection there within
    `timeout_s` (ray.init would wait minutes on an unreachable head). null with `nnodes` > 1 (which _connect turns
    into "auto") needs a running cluster that Ray can find from this machine: ray.init would otherwise fail in a
    traceback once the config is checked. An explicit "auto" is left to Ray."""
    from dagrl.config.errors import ConfigError

    if address is None and nnodes > 1:
        try:  # Ray's own lookup (RAY_ADDRESS, the cluster file ray start writes, running GCS processes)
            from ray._private.services import get_ray_address_from_environment

            found = get_ray_address_from_environment("auto", None)
        except ConnectionError:
            raise ConfigError(
                "trainer.ray_address",
                f"trainer.nnodes={nnodes} (trainer.ray_address=null joins a running cluster: auto) "
                f"with trainer.launcher=ray needs a running Ray cluster, and none was found "
                f"from this machine: start it (ray start --head here, ray start --address=<head>:6379 "
                f"on the other nodes) or set trainer.ray_address=<head>:<port>",
            ) from None
        except Exception:  # noqa: BLE001 - Ray's private lookup changed: ray.init names the problem itself
            return
        address = found if isinstance(found, str) else None
    if not isinstance(address, str) or address in ("auto", "local"):
        return
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not port.isdigit() or not host:
        return  # not host:port: Ray's own error names it
    host = host.strip("[]")  # [::1]:6379
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as error:
        reason = "no answer" if isinstance(error, TimeoutError) else (error.strerror or str(error) or "unreachable")
        raise ConfigError(
            "trainer.ray_address",
            f"trainer.ray_address={address}: no Ray head reachable at {host}:{port} within "
            f"{timeout_s:g} s ({reason}); start one there (ray start --head --port={port}), fix "
            f"trainer.ray_address, or set it to null for a local cluster",
        ) from None


class WorkerFailed(RuntimeError):
    def __init__(self, rank: int, message: str, exit_code: int = 1) -> None:
        super().__init__(f"rank {rank} failed: {message}")
        self.rank, self.exit_code = rank, exit_code


class Interrupted(Exception):
    """The workers stopped on a Ctrl-C the driver passed on: str() is their line for the user ('' when they stopped
    at once, with no step under way)."""


def _worker_class():
    import ray

    @ray.remote
    class TrainingWorker:
        """One rank: sets the torchrun environment, then validates and trains like a torchrun process."""

        def address(self) -> tuple[str, int]:
            import socket

            with socket.socket() as probe:
                probe.bind(("", 0))
                port = probe.getsockname()[1]
            return ray.util.get_node_ip_address(), port

        def pid(self) -> int:
            return os.getpid()

        def node(self) -> str:
            return ray.get_runtime_context().get_node_id()

        def train(self, cfg_data: dict, env: dict[str, str]) -> tuple[int, str]:
            """(exit code, one-line message): 2 for bad input, 1 for a stopped run, 0 when done."""
            os.environ.update(env)
            from dagrl.launch.process import setup_logging, train_process

            setup_logging()
            if threading.current_thread() is threading.main_thread():  # the driver's stop passed on during start-up
                install_start_handlers()  # (Ray's own SIGTERM handler would end the worker with exit code 1)
            try:
                return train_process(cfg_data)
            except StopBeforeStart as stop:
                return 0, stop.line()

    return TrainingWorker


def _connect(address: str | None, nnodes: int, slots: int, on_gpu: bool) -> None:
    import ray

    if address is None and nnodes > 1:
        address = "auto"  # a multi-node job joins the cluster `ray start --head` / `--address` built
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": True,
        "runtime_env": {"env_vars": {"TOKENIZERS_PARALLELISM": "false"}},
    }
    if address is None:  # a private single-node cluster: logical CPUs for every slot, whatever the core count
        kwargs["num_cpus"] = max(slots, os.cpu_count() or 1)
        if on_gpu:
            import torch

            kwargs["num_gpus"] = torch.cuda.device_count()
    ray.init(address=address, **kwargs)


def _placement_groups(nnodes: int, per_node: int, on_gpu: bool) -> list:
    from ray.util.placement_group import placement_group

    bundle = {"CPU": 1, "GPU": 1} if on_gpu else {"CPU": 1}
    groups = [placement_group([dict(bundle) for _ in range(per_node)], strategy="STRICT_PACK") for _ in range(nnodes)]
    import ray

    ready = [group.ready() for group in groups]
    done, _ = ray.wait(ready, num_returns=len(ready), timeout=PLACEMENT_TIMEOUT_S)
    if len(done) < len(ready):
        raise RuntimeError(
            f"Ray could not place {nnodes} node(s) x {per_node} worker(s) of {bundle} within "
            f"{PLACEMENT_TIMEOUT_S:.0f} s (cluster has {ray.cluster_resources()}): fix trainer.nnodes / "
            f"trainer.n_gpus_per_node or add nodes (ray start --address ...)"
        )
    return groups


def launch(cfg_data: dict) -> int:
    """Run the job on Ray workers; returns the process exit code (0 when every rank finished). After a failure
    (a worker that died, hung or stopped on an error) the workers are relaunched up to trainer.max_restarts times,
    each attempt resuming from the newest complete checkpoint (trainer.resume_mode=auto)."""
    import ray

    from dagrl.config.tree import Cfg
    from dagrl.config.validate import placement as placement_of

    trainer = cfg_data["trainer"]
    placement = placement_of(Cfg(cfg_data))
    # a pool spanning machines needs a cluster to join; pools of one node each may share a local one (set
    # trainer.ray_address=auto to spread them over a cluster)
    nnodes = max(pool.size // pool.per_node for pool in placement.pools)
    import torch

    on_gpu = torch.cuda.is_available()
    restarts = int(trainer.get("max_restarts", 0))
    with DriverSignals() as signals:
        try:
            _connect(trainer.get("ray_address"), nnodes, placement.world_size, on_gpu)
            signals.reinstall()
            for attempt in range(restarts + 1):
                try:
                    return _attempt(cfg_data, placement, on_gpu, attempt, signals)
                except WorkerFailed as failure:
                    if attempt == restarts or signals.names:  # no restart once a scheduler stopped the job
                        raise
                    logger.warning("restart %d of %d (trainer.max_restarts) after %s", attempt + 1, restarts, failure)
            return 0
        except KeyboardInterrupt:
            if signals.names and not signals.watching:  # a scheduler's stop before the workers trained
                raise StopBeforeStart(signals.names[0]) from None
            raise
        finally:
            ray.shutdown()


def _attempt(cfg_data: dict, placement, on_gpu: bool, attempt: int, signals: DriverSignals) -> int:
    """One launch of every worker, watched to the end; the placement groups are released after it."""
    import ray
    from ray.util.placement_group import remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    world = placement.world_size
    worker_cls = _worker_class()
    workers, groups = [], []
    try:
        for pool in placement.pools:  # in rank order: the rollout pool first
            for group in _placement_groups(pool.size // pool.per_node, pool.per_node, on_gpu):
                groups.append(group)
                for slot in range(pool.per_node):
                    strategy = PlacementGroupSchedulingStrategy(
                        placement_group=group, placement_group_bundle_index=slot
                    )
                    workers.append(
                        worker_cls.options(
                            num_cpus=1, num_gpus=1 if on_gpu else 0, scheduling_strategy=strategy
                        ).remote()
                    )
        master_addr, master_port = ray.get(workers[0].address.remote())
        pids = ray.get([worker.pid.remote() for worker in workers])
        nodes = ray.get([worker.node.remote() for worker in workers])
        logger.info(
            "ray: %d worker(s) on %d node(s), pids %s; rendezvous at %s:%d%s",
            world,
            len(set(nodes)),
            pids,
            master_addr,
            master_port,
            f" (restart {attempt})" if attempt else "",
        )
        runs = {}
        for rank, worker in enumerate(workers):
            env = {
                **placement.pool_of(rank).local_env(rank),
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": str(master_port),
                "DAGRL_LAUNCHER": "ray",
                "DAGRL_RESTARTS": str(attempt),
            }
            if not placement.is_colocated:  # the launch's ranks: each worker finds its pool (init_pools)
                env.update({"RANK": str(rank), "WORLD_SIZE": str(world)})
            if on_gpu:  # Ray gives each GPU worker only its own device (CUDA_VISIBLE_DEVICES): device 0 there
                env["LOCAL_RANK"] = "0"
            runs[worker.train.remote(cfg_data, env)] = rank
        return _watch(runs, workers, list(zip(nodes, pids)), signals)
    finally:
        for worker in workers:
            ray.kill(worker, no_restart=True)
        for group in groups:
            remove_placement_group(group)


def _watch(runs: dict, workers: list, where: list[tuple[str, int]], signals: DriverSignals | None = None) -> int:
    """Wait for every rank; on the first failure kill the rest and report that rank. A rank that died is the cause
    over a peer's error: when a rank fails with an error, the others get DEATH_GRACE_S to show a death (a rank killed
    outright ends its peers' collectives with "Connection reset by peer" before Ray notices it died). A Ctrl-C is
    passed on to the workers (`where`: their node ids and pids), whose stop then raises Interrupted; a second one
    raises KeyboardInterrupt, and the workers are killed on the way out. A SIGTERM/SIGUSR1 (`signals`) is passed on
    alike, and the workers' stop raises Stopped."""
    import ray

    signals = signals or DriverSignals()
    signals.watching = True
    pending, interrupted, stopped, lines = list(runs), False, None, {}
    while pending:
        try:
            with signals.waiting():
                done, pending = ray.wait(pending, num_returns=1)
        except KeyboardInterrupt:
            name = signals.take()
            if name is not None:  # a scheduler's stop: passed on once
                if stopped is None and not interrupted:
                    stopped = name
                    logger.warning("%s: passed on to the workers; they stop with a checkpoint after this step", name)
                    forward(where, signal.Signals[name])
                continue
            if interrupted:
                raise
            interrupted = True
            logger.warning(
                "Ctrl-C: the workers stop with a checkpoint once this step ends (its validation and save "
                "included); Ctrl-C again stops them at once without one"
            )
            forward(where, signal.SIGINT)
            continue
        rank = runs[done[0]]
        code, message, died = _outcome(done[0])
        if interrupted and died:  # no step under way: each worker stopped at once (os._exit), or will
            ray.wait(pending, num_returns=len(pending), timeout=DEATH_GRACE_S)
            raise Interrupted("")
        if code in (0, INTERRUPTED):
            if code == INTERRUPTED or message:  # a Ctrl-C's line; a worker stopped in its start-up says so
                lines[rank] = message
            continue
        if not died and pending:
            late, _ = ray.wait(pending, num_returns=len(pending), timeout=DEATH_GRACE_S)
            deaths = [(runs[ref], outcome) for ref in late if (outcome := _outcome(ref))[2]]
            if deaths:
                rank, (code, message, died) = min(deaths, key=lambda death: death[0])
        started = time.perf_counter()
        for worker in workers:
            ray.kill(worker, no_restart=True)
        logger.error(
            "rank %d failed; stopped the other %d worker(s) in %.1f s",
            rank,
            len(workers) - 1,
            time.perf_counter() - started,
        )
        raise WorkerFailed(rank, message, exit_code=code)
    said = next((line for line in lines.values() if line), "")
    if stopped is not None:
        raise Stopped(stopped, said)
    if lines:  # stopped on a Ctrl-C; the training side's rank 0 reports where
        raise Interrupted(said)
    return 0


def _outcome(ref) -> tuple[int, str, bool]:
    """(exit code, message, whether the process died) of a finished worker run."""
    import ray

    try:
        code, message = ray.get(ref)
        return code, message, False
    except ray.exceptions.RayActorError as err:  # the process died: killed, OOM, segfault
        return 1, f"worker process died ({type(err).__name__}: {str(err).splitlines()[0][:200]})", True
    except ray.exceptions.RayTaskError as err:  # an exception escaped the worker's train()
        return 1, str(err.cause if err.cause is not None else err).splitlines()[-1][:300], False
