"""Pre-flight of the launch environment beyond WORLD_SIZE (validate.world_size_from_env): the rank variables a
launcher sets, and MASTER_PORT, as a hand-written `export` leaves them. A wrong one would surface as a hang or a
traceback in torch.distributed once the process group starts."""
from __future__ import annotations

import os

from dagrl.config.checks import require


def _integer(name: str) -> int | None:
    text = os.environ.get(name)
    if text is None:
        return None
    value = text.strip()
    require(value.lstrip("-").isdigit(), name,
            f"environment variable {name}={text!r} is not an integer: unset it (one process) or let torchrun set it")
    return int(value)


def check_rank_variables(world_size: int) -> None:
    """RANK in 0..WORLD_SIZE-1, LOCAL_RANK in 0..LOCAL_WORLD_SIZE-1 (or the launch's size), MASTER_PORT a port."""
    launcher = "unset it (one process) or let torchrun set it (torchrun --nproc-per-node N)"
    rank = _integer("RANK")
    require(rank is None or 0 <= rank < world_size, "RANK",
            f"environment variable RANK={rank} is outside this launch of WORLD_SIZE={world_size} process(es) (ranks "
            f"0..{world_size - 1}): {launcher}")
    local_world = _integer("LOCAL_WORLD_SIZE")
    require(local_world is None or 1 <= local_world <= world_size, "LOCAL_WORLD_SIZE",
            f"environment variable LOCAL_WORLD_SIZE={local_world} must be in 1..WORLD_SIZE={world_size}: {launcher}")
    local_rank, bound = _integer("LOCAL_RANK"), local_world or world_size
    require(local_rank is None or 0 <= local_rank < bound, "LOCAL_RANK",
            f"environment variable LOCAL_RANK={local_rank} is outside 0..{bound - 1} (this node's processes: "
            f"{'LOCAL_WORLD_SIZE' if local_world else 'WORLD_SIZE'}={bound}): {launcher}")
    port = os.environ.get("MASTER_PORT")
    require(port is None or (port.strip().isdigit() and 1 <= int(port) <= 65535), "MASTER_PORT",
            f"environment variable MASTER_PORT={port!r} is not a port number (1..65535): set a free port, e.g. "
            f"MASTER_PORT=29500, or unset it")
