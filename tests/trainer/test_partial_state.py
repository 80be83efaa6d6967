"""A checkpoint's partial-rollout buffers: written one file per rollout shard, read back by shard; a checkpoint whose
folder has the earlier name `rollout_pool/` reads the same."""

from __future__ import annotations

import shutil

import pytest

from dagrl.config.errors import RunError
from dagrl.trainer.partial_state import read_partial, read_partials, write_partials


def test_buffers_round_trip_by_shard_under_either_folder_name(tmp_path):
    saved = {0: [{"uid": "a", "position": 3}], 1: [{"uid": "b", "position": 7}, {"uid": "c", "position": 1}]}
    new, old = tmp_path / "global_step_2", tmp_path / "earlier" / "global_step_2"
    new.mkdir()
    write_partials(new, saved)
    assert sorted(p.name for p in (new / "partial_rollout").iterdir()) == ["dp0.json", "dp1.json"]
    shutil.copytree(new / "partial_rollout", old / "rollout_pool")
    for checkpoint in (new, old):
        assert read_partials(checkpoint, 2) == [saved[0], saved[1]]
        assert read_partial(checkpoint, 1) == saved[1]
        with pytest.raises(RunError, match="holds no partial-rollout buffer for rollout shard 2"):
            read_partial(checkpoint, 2)  # saved with two rollout shards, resumed with three
    (tmp_path / "plain").mkdir()
    assert read_partials(tmp_path / "plain", 2) is None and read_partial(tmp_path / "plain", 0) is None
