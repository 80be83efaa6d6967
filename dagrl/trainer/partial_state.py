"""A checkpoint's partial-rollout buffers: one JSON file per rollout shard under `partial_rollout/`, written by the
ranks that hold a buffer and read back by a resumed rank, or by the training pool for the rollout pool."""

from __future__ import annotations

import json
from pathlib import Path

from dagrl.config.errors import RunError

BUFFER_DIR = "partial_rollout"
EARLIER_DIR = "rollout_pool"  # the same files, as checkpoints of earlier dagrl versions name the folder


def _folder(path: Path) -> Path:
    return path / (EARLIER_DIR if (path / EARLIER_DIR).is_dir() and not (path / BUFFER_DIR).is_dir() else BUFFER_DIR)


def write_partials(directory: Path, buffers: dict[int, list]) -> None:
    """`buffers` {rollout shard: buffer state} into the checkpoint being written at `directory`."""
    for shard, buffer in buffers.items():
        (directory / BUFFER_DIR).mkdir(exist_ok=True)
        (directory / BUFFER_DIR / f"dp{shard}.json").write_text(json.dumps(buffer))


def read_partial(path: Path, shard: int) -> list | None:
    """Rollout shard `shard`'s partial-rollout buffer in the checkpoint at `path` (None: saved without one)."""
    saved = _folder(path) / f"dp{shard}.json"
    if not saved.is_file():
        if _folder(path).is_dir():
            raise RunError(
                f"{path} holds no partial-rollout buffer for rollout shard {shard}: it was saved with "
                f"another rollout layout; resume it with the same number of rollout processes and "
                f"rollout tensor_model_parallel_size"
            )
        return None
    return json.loads(saved.read_text())


def read_partials(path: Path, shards: int) -> list | None:
    """Every rollout shard's buffer (None: the checkpoint holds none)."""
    return [read_partial(path, shard) for shard in range(shards)] if _folder(path).is_dir() else None


def restore_partial(ctx, train_data, state: list | None) -> None:
    """A rank's partial-rollout buffer (`ctx.partial`) from its saved state; None leaves it empty."""
    from dagrl.nodes.common import train_sampling

    if state is None:
        return
    rows = train_data.rows([group["position"] for group in state])
    rows["uid"] = [group["uid"] for group in state]
    rows["position"] = [group["position"] for group in state]
    # buffers saved before the prompt ledger: the epoch of the draw is unknown
    rows["ledger_uid"] = [group.get("ledger_uid", f"?:{group['position']}") for group in state]
    ctx.partial.load_state_dict(state, rows, train_sampling(ctx, rows))  # the rows' response limits
