"""Small torch.distributed helpers that work the same in a world of one."""

from __future__ import annotations

import gc
from typing import Callable

import torch
import torch.distributed as dist

# Before any process group: its functions take group.WORLD as a default argument, so imported later (by
# torch.distributed.checkpoint, at the first save) they would keep the default group alive past destroy_process_groups.
import torch.distributed.nn  # noqa: F401 - imported for its effect (see above)


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if is_initialized() else 1


def barrier() -> None:
    if is_initialized():
        dist.barrier()


def _reduce_device() -> torch.device:
    """Where a collective's tensor must live: NCCL reduces only CUDA tensors, gloo only host ones."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def _all_reduce(values: torch.Tensor, op: dist.ReduceOp.RedOpType) -> torch.Tensor:
    """A float64 host copy of `values`, reduced over all ranks with `op` when a process group exists."""
    if not is_initialized():
        return values.detach().to(torch.float64).cpu().clone()
    totals = values.detach().to(device=_reduce_device(), dtype=torch.float64).clone()
    dist.all_reduce(totals, op=op)
    return totals.cpu()


def data_parallel_sums(values: torch.Tensor, model_parallel_size: int) -> torch.Tensor:
    """Element-wise sums over data-parallel ranks of a small tensor, in float64 (one all-reduce): ranks of one
    model-parallel group hold identical data, so a world sum counts each DP shard once per model-parallel rank."""
    totals = _all_reduce(values, dist.ReduceOp.SUM)
    return totals / model_parallel_size if is_initialized() else totals


def data_parallel_sum(value: float, model_parallel_size: int) -> float:
    """Sum of one number over data-parallel ranks (see data_parallel_sums)."""
    return float(data_parallel_sums(torch.tensor([value], dtype=torch.float64), model_parallel_size)[0])


def global_max(values: torch.Tensor) -> torch.Tensor:
    """Element-wise max over all ranks in float64 (model-parallel replicas do not change a max)."""
    return _all_reduce(values, dist.ReduceOp.MAX)


def all_to_all_bytes(payloads: list[bytes]) -> list[bytes]:
    """`payloads[r]` goes to rank r; returns what each rank sent here. Two all_to_all_single calls (the sizes,
    then the bytes), which gloo runs on host tensors and NCCL on CUDA ones: no pairwise send/recv to order."""
    device = _reduce_device()
    send_sizes = [len(payload) for payload in payloads]
    sizes = torch.tensor(send_sizes, dtype=torch.int64, device=device)
    recv_sizes_tensor = torch.empty_like(sizes)
    dist.all_to_all_single(recv_sizes_tensor, sizes)
    recv_sizes = recv_sizes_tensor.tolist()
    joined = b"".join(payloads)
    send = (torch.frombuffer(bytearray(joined), dtype=torch.uint8) if joined else torch.empty(0, dtype=torch.uint8)).to(
        device
    )
    received = torch.empty(sum(recv_sizes), dtype=torch.uint8, device=device)
    dist.all_to_all_single(received, send, output_split_sizes=recv_sizes, input_split_sizes=send_sizes)
    data = received.cpu().numpy().tobytes()
    starts = [sum(recv_sizes[:source]) for source in range(len(recv_sizes))]
    return [data[start : start + size] for start, size in zip(starts, recv_sizes)]


def all_gather_objects(obj: object) -> list:
    """Every rank's `obj` (picklable), in rank order; [obj] in a world of one."""
    if not is_initialized() or dist.get_world_size() == 1:
        return [obj]
    gathered: list = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def broadcast_object(obj: object, src: int = 0) -> object:
    """Rank `src`'s `obj` (picklable) on every rank."""
    if not is_initialized() or dist.get_world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def mean_over_ranks(metrics: dict[str, float]) -> dict[str, float]:
    """Average every metric over all ranks (every rank must pass the same keys), except that `.../max` is the
    maximum and `.../min` the minimum over ranks: a mean of the ranks' longest responses is nobody's longest."""
    if not is_initialized() or dist.get_world_size() == 1 or not metrics:
        return metrics
    keys = sorted(metrics)
    values = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64, device=_reduce_device())
    sign = torch.tensor([-1.0 if k.endswith("/min") else 1.0 for k in keys], dtype=torch.float64, device=values.device)
    extreme = values * sign
    dist.all_reduce(values)
    dist.all_reduce(extreme, op=dist.ReduceOp.MAX)
    values /= dist.get_world_size()
    values = torch.where(sign < 0, -extreme, torch.where(_ends(keys, "/max", values.device), extreme, values))
    return dict(zip(keys, values.cpu().tolist()))


def _ends(keys: list[str], suffix: str, device) -> torch.Tensor:
    return torch.tensor([k.endswith(suffix) for k in keys], device=device)


def init_process_group(timeout_s: float | None = None) -> None:
    """gloo on CPU, nccl on GPU; torchrun's env when present, else a world of one on a free local port. A collective
    waits `timeout_s` for its peers before it fails (None: PyTorch's default)."""
    if is_initialized():
        return
    import os
    import socket

    if "WORLD_SIZE" not in os.environ:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        os.environ.update(
            {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        )
    import datetime

    timeout = datetime.timedelta(seconds=timeout_s) if timeout_s is not None else None
    store, rank_, world = launch_store(timeout)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(
        backend, store=store, rank=rank_, world_size=world, **({"timeout": timeout} if timeout is not None else {})
    )
    from dagrl.utils import watchdog

    watchdog.attach(store)


# what must be freed before the default process group: an engine's own groups, registered by whoever created them
_TEARDOWNS: list[Callable[[], None]] = []


def before_destroy(teardown: Callable[[], None]) -> None:
    """Run `teardown` (once) when destroy_process_groups frees the default group, before it."""
    if teardown not in _TEARDOWNS:
        _TEARDOWNS.append(teardown)


def destroy_process_groups(release: Callable[[], None] | None = None) -> None:
    """The run is over (every rank got here): destroy every process group, Megatron's included, while the interpreter
    is whole. A gloo group's worker threads are joined only when the group is freed; left to the interpreter's shutdown,
    a worker still releasing the last collective's tensors needs the GIL, and the process aborts after a finished run
    ("terminate called without an active exception", pytorch#190489). Not on an error path: NCCL's shutdown waits for
    peers that may be inside a collective. Only in gloo (CPU) worlds so far: a GPU run, with NCCL groups and vLLM's
    own beside Megatron's, has not exercised it, and keeps the interpreter's teardown it always had. `release`: drops
    the references to groups outside torch's registry (the two-pool bridge's), first."""
    if not is_initialized() or dist.get_backend() != "gloo":
        return
    if release is not None:
        release()
    teardowns = list(_TEARDOWNS)
    _TEARDOWNS.clear()
    for teardown in teardowns:  # the groups of an engine's parallel state (Megatron's), freed by their owner
        teardown()
    if not teardowns:
        gc.collect()
    dist.destroy_process_group()


def launch_store(timeout=None) -> tuple[object, int, int]:
    """(store, rank, world size) of the launch from torchrun's (or Ray's) environment. Keys live under the launcher's
    restart count: torchrun --max-restarts keeps one agent store across restarts, where the process groups of a
    restarted attempt would read the dead attempt's addresses."""
    import datetime
    import os

    kwargs = {"timeout": timeout or datetime.timedelta(minutes=30)}
    store, rank_, world = next(dist.rendezvous("env://", **kwargs))
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"dagrl/attempt{attempt}", store), rank_, world
