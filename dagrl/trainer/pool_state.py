"""A checkpoint's partial-rollout pools: one JSON file per rollout shard under `rollout_pool/`, written by the
ranks that hold a pool and read back by a resumed rank, or by the training pool for the rollout pool."""
from __future__ import annotations

import json
from pathlib import Path

from dagrl.config.errors import RunError

POOL_DIR = "rollout_pool"


def write_pools(directory: Path, pools: dict[int, list]) -> None:
    """`pools` {rollout shard: pool state} into the checkpoint being written at `directory`."""
    for shard, pool in pools.items():
        (directory / POOL_DIR).mkdir(exist_ok=True)
        (directory / POOL_DIR / f"dp{shard}.json").write_text(json.dumps(pool))


def read_pool(path: Path, shard: int) -> list | None:
    """Rollout shard `shard`'s partial-rollout pool in the checkpoint at `path` (None: saved without one)."""
    saved = path / POOL_DIR / f"dp{shard}.json"
    if not saved.is_file():
        if (path / POOL_DIR).is_dir():
            raise RunError(f"{path} holds no partial-rollout pool for rollout shard {shard}: it was saved with "
                           f"another rollout layout; resume it with the same number of rollout processes and "
                           f"rollout tensor_model_parallel_size")
        return None
    return json.loads(saved.read_text())


def read_pools(path: Path, shards: int) -> list | None:
    """Every rollout shard's pool (None: the checkpoint holds none)."""
    return [read_pool(path, shard) for shard in range(shards)] if (path / POOL_DIR).is_dir() else None


def restore_pool(ctx, train_data, state: list | None) -> None:
    """A rank's partial-rollout pool (`ctx.pool`) from its saved state; None leaves it empty."""
    from dagrl.nodes.rollout import train_sampling

    if state is None:
        return
    rows = train_data.rows([group["position"] for group in state])
    rows["uid"] = [group["uid"] for group in state]
    rows["position"] = [group["position"] for group in state]
    # pools saved before the prompt ledger: the epoch of the draw is unknown
    rows["ledger_uid"] = [group.get("ledger_uid", f"?:{group['position']}") for group in state]
    ctx.pool.load_state_dict(state, rows, train_sampling(ctx, rows))  # the rows' response limits
