"""Pre-flight of the launch environment beyond WORLD_SIZE (validate.world_size_from_env): the rank variables a
launcher sets, and MASTER_PORT, as a hand-written `export` leaves them. A wrong one would surface as a hang or a
traceback in torch.distributed once the process group starts. Also the environment the determinism switch needs,
set in each launched process before CUDA or NCCL start."""

from __future__ import annotations

import os

from dagrl.config.errors import require
from dagrl.config.errors import ConfigError


def _integer(name: str) -> int | None:
    text = os.environ.get(name)
    if text is None:
        return None
    value = text.strip()
    require(
        value.lstrip("-").isdigit(),
        name,
        f"environment variable {name}={text!r} is not an integer: unset it (one process) or let torchrun set it",
    )
    return int(value)


def check_rank_variables(world_size: int) -> None:
    """RANK in 0..WORLD_SIZE-1, LOCAL_RANK in 0..LOCAL_WORLD_SIZE-1 (or the launch's size), MASTER_PORT a port."""
    launcher = "unset it (one process) or let torchrun set it (torchrun --nproc-per-node N)"
    rank = _integer("RANK")
    require(
        rank is None or 0 <= rank < world_size,
        "RANK",
        f"environment variable RANK={rank} is outside this launch of WORLD_SIZE={world_size} process(es) (ranks "
        f"0..{world_size - 1}): {launcher}",
    )
    local_world = _integer("LOCAL_WORLD_SIZE")
    require(
        local_world is None or 1 <= local_world <= world_size,
        "LOCAL_WORLD_SIZE",
        f"environment variable LOCAL_WORLD_SIZE={local_world} must be in 1..WORLD_SIZE={world_size}: {launcher}",
    )
    local_rank, bound = _integer("LOCAL_RANK"), local_world or world_size
    require(
        local_rank is None or 0 <= local_rank < bound,
        "LOCAL_RANK",
        f"environment variable LOCAL_RANK={local_rank} is outside 0..{bound - 1} (this node's processes: "
        f"{'LOCAL_WORLD_SIZE' if local_world else 'WORLD_SIZE'}={bound}): {launcher}",
    )
    port = os.environ.get("MASTER_PORT")
    require(
        port is None or (port.strip().isdigit() and 1 <= int(port) <= 65535),
        "MASTER_PORT",
        f"environment variable MASTER_PORT={port!r} is not a port number (1..65535): set a free port, e.g. "
        f"MASTER_PORT=29500, or unset it",
    )


def check_local_world(nnodes: int, per_node: int, world_size: int) -> None:
    """A colocated launch whose world matches trainer.nnodes x trainer.n_gpus_per_node can still split it
    otherwise: torchrun's LOCAL_WORLD_SIZE is the processes on this node. trainer.n_gpus_per_node must be that, or
    the run would place ranks (GPUs, the per-machine data cache) on nodes that do not hold them."""
    local_world = _integer("LOCAL_WORLD_SIZE")
    if local_world is None or local_world == per_node:
        return
    fix = (
        f"set trainer.nnodes={world_size // local_world} trainer.n_gpus_per_node={local_world}"
        if world_size % local_world == 0
        else f"start torchrun --nnodes {nnodes} --nproc-per-node {per_node}"
    )
    raise ConfigError(
        "trainer.n_gpus_per_node",
        f"trainer.nnodes={nnodes} x trainer.n_gpus_per_node={per_node} but this launch has "
        f"LOCAL_WORLD_SIZE={local_world} process(es) on each node (WORLD_SIZE={world_size}): {fix}",
    )


def check_rendezvous_env() -> None:
    """WORLD_SIZE set (by hand: `export WORLD_SIZE=2`) without the rest of what torchrun sets: torch.distributed's
    env:// rendezvous needs RANK, MASTER_ADDR and MASTER_PORT too, and would fail in a traceback (or, with them but
    no peer process, wait for it). Run after pre-flight, which reads WORLD_SIZE alone to validate a launch."""
    if "WORLD_SIZE" not in os.environ:
        return
    missing = [name for name in ("RANK", "MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    require(
        not missing,
        "WORLD_SIZE",
        f"environment variable WORLD_SIZE={os.environ['WORLD_SIZE']} is set but {', '.join(missing)} "
        f"{'is' if len(missing) == 1 else 'are'} not: start the processes with torchrun (torchrun "
        f"--nproc-per-node {os.environ['WORLD_SIZE']} -m dagrl.main_dag ...), which sets them all, or unset "
        f"WORLD_SIZE for one process",
    )


# what actor_rollout_ref.actor.megatron.use_deterministic_algorithms sets where unset, and what it accepts where set:
# cuBLAS's fixed workspaces, NCCL algorithms whose reduction order is fixed (Megatron-Core's list), TransformerEngine's
# deterministic kernels (its attention refuses deterministic_mode without it)
DETERMINISTIC_ENV = {
    "CUBLAS_WORKSPACE_CONFIG": (":4096:8", {":4096:8", ":16:8"}),
    "NCCL_ALGO": ("Ring", {"Ring", "CollnetDirect", "CollnetChain", "^NVLS"}),
    "NVTE_ALLOW_NONDETERMINISTIC_ALGO": ("0", {"0"}),
}
DETERMINISM_KEY = "actor_rollout_ref.actor.megatron.use_deterministic_algorithms"


def apply_determinism(switch: bool) -> None:
    """The switch's process-wide part, before CUDA, NCCL or any model starts: the environment above, and torch's
    deterministic algorithms (the Megatron engine reads that flag to set deterministic_mode)."""
    if not switch:
        return
    for name, (default, accepted) in DETERMINISTIC_ENV.items():
        value = os.environ.setdefault(name, default)
        parts = [part.strip() for part in value.split(",")] if name == "NCCL_ALGO" else [value]
        require(
            all(part in accepted for part in parts),
            name,
            f"environment variable {name}={value!r} is not deterministic, which {DETERMINISM_KEY}=true needs: unset "
            f"it (dagrl sets {name}={default}) or set one of {', '.join(sorted(accepted))}",
        )
    import torch

    torch.use_deterministic_algorithms(True)
