"""training/rollout_*_diff metrics are global: two gloo ranks holding different DP shards report, after the loop's
averaging over ranks, the max and the token means of the whole batch (not the mean of per-rank maxes)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dagrl.nodes.log_prob import rollout_mismatch
from dagrl.utils.dist import data_parallel_sums, mean_over_ranks
from tests.engine.engine_helpers import free_port

WORLD = 2
MAX_KEY = "training/rollout_probs_diff_max"


def whole_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Four responses of four tokens; the actor/rollout gap is large only in the first shard's rows, and the shards
    hold different numbers of response tokens (so per-rank means averaged would differ too)."""
    generator = torch.Generator().manual_seed(0)
    rollout = -torch.rand(4, 4, generator=generator) - 0.1
    old = rollout.clone()
    old[0, 1] += 0.9  # the biggest gap, on rank 0
    old[2:] += 0.05 * torch.rand(2, 4, generator=generator)
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]])
    return old, rollout, mask


def _local_sum(values: torch.Tensor) -> torch.Tensor:
    return values.double()


def run(rank: int, port: int, out_dir: str) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        rows = slice(2 * rank, 2 * rank + 2)  # one DP shard per rank (no model-parallel replicas)
        old, rollout, mask = (tensor[rows] for tensor in whole_batch())
        reduce_sum = functools.partial(data_parallel_sums, model_parallel_size=1)
        local = rollout_mismatch(old, rollout, mask, reduce_sum)
        torch.save({"node": local, "logged": mean_over_ranks(local)}, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_rollout_probs_diff_max_is_the_global_max_on_two_ranks(tmp_path):
    mp.spawn(run, args=(free_port(), str(tmp_path)), nprocs=WORLD)
    whole = rollout_mismatch(*whole_batch(), _local_sum)
    old, rollout, mask = whole_batch()
    gap = (old.exp() - rollout.exp()).abs()[mask.bool()]
    assert whole[MAX_KEY] == pytest.approx(gap.max().item())
    shard_max = [
        gap_rows.max().item()
        for gap_rows in ((old[r].exp() - rollout[r].exp()).abs()[mask[r].bool()] for r in (slice(0, 2), slice(2, 4)))
    ]
    assert whole[MAX_KEY] == pytest.approx(max(shard_max)) and max(shard_max) > 2 * min(shard_max)
    for rank in range(WORLD):
        result = torch.load(tmp_path / f"rank{rank}.pt")
        for stage in ("node", "logged"):  # what the node returns and what the loop logs after averaging
            assert result[stage].keys() == whole.keys()
            for key, value in whole.items():
                assert result[stage][key] == pytest.approx(value, rel=1e-12), (rank, stage, key)
        # averaging per-rank maxes (the old behaviour) would have logged something else
        assert result["logged"][MAX_KEY] != pytest.approx(sum(shard_max) / WORLD)
