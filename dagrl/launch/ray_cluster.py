"""trainer.launcher=ray: one worker process per GPU (per CPU slot on a CPU run), placed by Ray.

The driver (the `python3 -m dagrl.main_dag` process) has already validated the config. It joins a Ray cluster
(`trainer.ray_address`; "auto" when trainer.nnodes > 1, else a local one it starts), reserves one placement group
per node with `trainer.n_gpus_per_node` bundles (STRICT_PACK, so a node's ranks share a machine), starts one
worker actor per bundle and gives each the torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR/PORT). Workers then rendezvous through torch.distributed (NCCL on GPU, gloo on CPU) and run exactly
what a torchrun rank runs. The driver only watches: the first worker to fail or die ends the job — every other
worker is killed (so nobody waits on a dead gloo/NCCL peer) and the driver exits non-zero naming that rank.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any

from dagrl.placement import Placement

logger = logging.getLogger(__name__)

PLACEMENT_TIMEOUT_S = 120.0


class WorkerFailed(RuntimeError):
    def __init__(self, rank: int, message: str, exit_code: int = 1) -> None:
        super().__init__(f"rank {rank} failed: {message}")
        self.rank, self.exit_code = rank, exit_code


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

        def train(self, cfg_data: dict, env: dict[str, str]) -> tuple[int, str]:
            """(exit code, one-line message): 2 for bad input, 1 for a stopped run, 0 when done."""
            os.environ.update(env)
            from dagrl.main_dag import setup_logging, train_process

            setup_logging()
            return train_process(cfg_data)

    return TrainingWorker


def _connect(address: str | None, nnodes: int, slots: int, on_gpu: bool) -> None:
    import ray

    if address is None and nnodes > 1:
        address = "auto"  # a multi-node job joins the cluster `ray start --head` / `--address` built
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True,
                              "runtime_env": {"env_vars": {"TOKENIZERS_PARALLELISM": "false"}}}
    if address is None:  # a private single-node cluster: logical CPUs for every slot, whatever the core count
        kwargs["num_cpus"] = max(slots, os.cpu_count() or 1)
        if on_gpu:
            import torch
            kwargs["num_gpus"] = torch.cuda.device_count()
    ray.init(address=address, **kwargs)


def _placement_groups(nnodes: int, per_node: int, on_gpu: bool) -> list:
    from ray.util.placement_group import placement_group

    bundle = {"CPU": 1, "GPU": 1} if on_gpu else {"CPU": 1}
    groups = [placement_group([dict(bundle) for _ in range(per_node)], strategy="STRICT_PACK")
              for _ in range(nnodes)]
    import ray
    ready = [group.ready() for group in groups]
    done, _ = ray.wait(ready, num_returns=len(ready), timeout=PLACEMENT_TIMEOUT_S)
    if len(done) < len(ready):
        raise RuntimeError(
            f"Ray could not place {nnodes} node(s) x {per_node} worker(s) of {bundle} within "
            f"{PLACEMENT_TIMEOUT_S:.0f} s (cluster has {ray.cluster_resources()}): fix trainer.nnodes / "
            f"trainer.n_gpus_per_node or add nodes (ray start --address ...)")
    return groups


def launch(cfg_data: dict) -> int:
    """Run the job on Ray workers; returns the process exit code (0 when every rank finished)."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    trainer = cfg_data["trainer"]
    nnodes, per_node = int(trainer["nnodes"]), int(trainer["n_gpus_per_node"])
    placement = Placement.colocated(nnodes, per_node)
    world = placement.world_size
    import torch
    on_gpu = torch.cuda.is_available()
    _connect(trainer.get("ray_address"), nnodes, world, on_gpu)
    try:
        groups = _placement_groups(nnodes, per_node, on_gpu)
        worker_cls = _worker_class()
        workers = []
        for node, group in enumerate(groups):
            for slot in range(per_node):
                strategy = PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=slot)
                workers.append(worker_cls.options(num_cpus=1, num_gpus=1 if on_gpu else 0,
                                                  scheduling_strategy=strategy).remote())
        master_addr, master_port = ray.get(workers[0].address.remote())
        pids = ray.get([worker.pid.remote() for worker in workers])
        logger.info("ray: %d worker(s) on %d node(s), pids %s; rendezvous at %s:%d", world, nnodes, pids,
                    master_addr, master_port)
        runs = {}
        for rank, worker in enumerate(workers):
            env = {**placement.pool_of(rank).local_env(rank), "MASTER_ADDR": master_addr,
                   "MASTER_PORT": str(master_port), "DAGRL_LAUNCHER": "ray"}
            if on_gpu:  # Ray gives each GPU worker only its own device (CUDA_VISIBLE_DEVICES): device 0 there
                env["LOCAL_RANK"] = "0"
            runs[worker.train.remote(cfg_data, env)] = rank
        return _watch(runs, workers)
    finally:
        ray.shutdown()


def _watch(runs: dict, workers: list) -> int:
    """Wait for every rank; on the first failure kill the rest and report that rank."""
    import ray

    pending = list(runs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        rank = runs[done[0]]
        try:
            code, message = ray.get(done[0])
        except ray.exceptions.RayActorError as err:  # the process died: killed, OOM, segfault
            code, message = 1, f"worker process died ({type(err).__name__}: {str(err).splitlines()[0][:200]})"
        except ray.exceptions.RayTaskError as err:  # an exception escaped the worker's train()
            code, message = 1, str(err.cause if err.cause is not None else err).splitlines()[-1][:300]
        if code != 0:
            started = time.perf_counter()
            for worker in workers:
                ray.kill(worker, no_restart=True)
            logger.error("rank %d failed; stopped the other %d worker(s) in %.1f s", rank, len(workers) - 1,
                         time.perf_counter() - started)
            raise WorkerFailed(rank, message, exit_code=code)
    return 0
