"""What only the process that trains can check, after pre-flight and before any model is built: this machine's
devices (pre-flight also runs on a Ray driver or in dagrl.plan, which may have none), the files the run writes
beside its checkpoints, the tracking server, and the rendezvous port. Each problem is one line, within seconds.
Joining the other processes (`joining`) is bounded by actor_rollout_ref.nccl_timeout and ends in one line too."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import time
from pathlib import Path
from typing import Iterator
from urllib.parse import urlparse

from dagrl.config.errors import ConfigError, RunError, require
from dagrl.config.checks import as_list
from dagrl.config.preflight.fp8 import check_fp8_devices

logger = logging.getLogger(__name__)
CP_KEY = "actor_rollout_ref.actor.megatron.context_parallel_size"
SERVER_WAIT_S = 5.0  # a tracking server that does not accept a connection in this long is down or unreachable


def check_start(cfg) -> None:
    check_context_parallel_device(cfg)
    check_fp8_devices(cfg)
    check_output_files(cfg)
    check_tracking_server(cfg)
    check_master_port()


def check_context_parallel_device(cfg) -> None:
    """Context parallelism splits packed sequences with TransformerEngine's THD attention: GPUs only."""
    cp = cfg.actor_rollout_ref.actor.megatron.context_parallel_size
    if cp == 1:
        return
    import importlib.util

    import torch

    missing = (
        "no GPU (torch.cuda.is_available() is false)"
        if not torch.cuda.is_available()
        else "no transformer_engine installed"
        if importlib.util.find_spec("transformer_engine") is None
        else None
    )
    require(
        missing is None,
        CP_KEY,
        f"{CP_KEY}={cp} splits sequences with TransformerEngine's attention on GPUs, and this machine has {missing}: "
        f"set {CP_KEY}=1 here, or run on GPUs with transformer_engine installed",
    )


def _folder_problem(path: Path) -> str | None:
    """Why `path` cannot be (or become) a folder: it, or the nearest existing folder above it, is a file."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return None if probe.is_dir() else f"{probe} is a file"


def check_output_files(cfg) -> None:
    """The files the run writes next to its checkpoints have the kind they must: metrics.jsonl a file, the
    tensorboard, data cache and mlflow store folders; else the run fails in a traceback once it writes there."""
    from dagrl.trainer.tracking import tensorboard_dir

    trainer, root = cfg.trainer, Path(os.path.expanduser(cfg.trainer.default_local_dir))
    loggers = as_list(trainer.logger)
    folders = [(cfg.data.cache_dir or str(root / "data_cache"), "data.cache_dir", "the data cache")]
    if "tensorboard" in loggers:
        chosen = tensorboard_dir(trainer.tensorboard_dir, str(root))
        folders.append((chosen, "trainer.tensorboard_dir", "the tensorboard events"))
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    store = str(root / "mlruns") if not uri else urlparse(uri).path if uri.startswith("file:") else None
    if "mlflow" in loggers and store:
        folders.append((store, "MLFLOW_TRACKING_URI", "the mlflow file store"))
    for path, key, what in folders:
        problem = _folder_problem(Path(os.path.expanduser(path)))
        require(
            problem is None,
            key,
            f"{what} go{'es' if what.endswith(('cache', 'store')) else ''} in {path}, but {problem}: move the "
            f"file away, or set {key} to a folder",
        )
    metrics = root / "metrics.jsonl"
    require(
        "jsonl" not in loggers or not metrics.is_dir(),
        "trainer.default_local_dir",
        f"the jsonl logger appends to {metrics}, which is a folder: move it away, or set trainer.default_local_dir "
        f"to another directory",
    )


def check_tracking_server(cfg) -> None:
    """MLFLOW_TRACKING_URI naming a server: it accepts a connection within seconds (rank 0 logs to it; mlflow
    itself retries for minutes before failing in a traceback)."""
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if "mlflow" not in as_list(cfg.trainer.logger) or os.environ.get("RANK", "0") != "0":
        return
    parsed = urlparse(uri)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return
    from urllib.request import getproxies, proxy_bypass

    if parsed.scheme in getproxies() and not proxy_bypass(parsed.hostname):
        return  # mlflow's requests go through the proxy: a direct connection proves nothing
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=SERVER_WAIT_S).close()
    except OSError as error:
        why = "no answer" if isinstance(error, TimeoutError) else error.strerror or type(error).__name__
        raise ConfigError(
            "MLFLOW_TRACKING_URI",
            f"MLFLOW_TRACKING_URI={uri} cannot be reached ({why} within {SERVER_WAIT_S:.0f} s): start the server or "
            f"fix the address, or unset it (mlflow then writes a file store under trainer.default_local_dir)",
        ) from None


def _hand_launched() -> bool:
    """A multi-process world from a hand-exported environment: not torchrun's (its agent holds MASTER_PORT) nor
    Ray's (dagrl picks the port)."""
    return (
        int(os.environ.get("WORLD_SIZE", "1") or 1) > 1
        and "TORCHELASTIC_RUN_ID" not in os.environ
        and os.environ.get("DAGRL_LAUNCHER") != "ray"
    )


def check_master_port() -> None:
    """Rank 0 of a hand-exported world binds MASTER_PORT for the rendezvous: a port in use would fail there in a
    traceback (EADDRINUSE). Bound as the rendezvous store binds it (address reuse on: a port in TIME_WAIT is free)."""
    if not _hand_launched() or os.environ.get("RANK") != "0":
        return
    port = os.environ["MASTER_PORT"]
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", int(port)))
        except (OSError, ValueError) as error:
            why = "in use on this machine" if getattr(error, "errno", None) == 98 else f"not usable ({error})"
            raise ConfigError(
                "MASTER_PORT",
                f"MASTER_PORT={port} is {why}: rank 0 listens there for the other processes; export a free port "
                f"(the same on every rank), or stop what holds it (ss -ltnp | grep :{port})",
            ) from None


@contextlib.contextmanager
def joining(timeout_s: float) -> Iterator[None]:
    """The process group's rendezvous: in a hand-exported world, say who is awaited, and turn a peer that never
    comes (or a rank 0 never reached) into one line naming MASTER_ADDR:MASTER_PORT and WORLD_SIZE."""
    if not _hand_launched():
        yield
        return
    where = f"MASTER_ADDR:MASTER_PORT={os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    world, rank = os.environ["WORLD_SIZE"], os.environ.get("RANK")
    logger.info("rank %s waits up to %.0f s for WORLD_SIZE=%s processes at %s", rank, timeout_s, world, where)

    def failed(why: str) -> RunError:
        return RunError(
            f"rank {rank} could not join the other processes of WORLD_SIZE={world} at {where} within {timeout_s:.0f} "
            f"s (actor_rollout_ref.nccl_timeout; {why}): start every rank with the same MASTER_ADDR, MASTER_PORT "
            f"and WORLD_SIZE, and RANK 0..{int(world) - 1} (torchrun --nproc-per-node {world} does this)"
        )

    if rank != "0":  # wait for rank 0's port here: torch's client logs a C++ stack for every failed try
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
                socket.create_connection(address, timeout=min(2.0, timeout_s)).close()
                break
            except OSError as error:
                if time.monotonic() >= deadline:
                    raise failed(f"rank 0 never listened: {error.strerror or error}") from None
                time.sleep(0.5)
    try:
        yield
    except (RuntimeError, OSError) as error:  # torch's DistStoreError / DistNetworkError (RuntimeErrors), sockets
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        joined = re.search(r"(\d+)/(\d+) clients joined", first)  # torch's text carries its own rounded seconds
        raise failed(f"{joined[1]} of {joined[2]} processes came" if joined else first) from error
