"""Batch statistics are global over data-parallel ranks: gloo processes holding DP shards (and model-parallel
replicas of them) compute the same whitened advantages, counts and metrics as one process holding the whole
batch."""

import pytest
import torch
import torch.multiprocessing as mp

from tests.algo import dist_worker
from tests.engine.engine_helpers import free_port


def _whole(partial: torch.Tensor) -> torch.Tensor:
    return partial.double()


@pytest.mark.parametrize(
    "world_size,model_parallel",
    [
        (2, 1),  # two DP shards
        pytest.param(4, 2, marks=pytest.mark.slow),  # two DP shards, each held by two model-parallel ranks
    ],
)
def test_statistics_over_dp_shards_equal_the_whole_batch(tmp_path, world_size, model_parallel):
    mp.spawn(dist_worker.run, args=(world_size, model_parallel, free_port(), str(tmp_path)), nprocs=world_size)
    shards = world_size // model_parallel
    whole = dist_worker.statistics(dist_worker.full_batch(), _whole)
    for rank in range(world_size):
        result = torch.load(tmp_path / f"rank{rank}.pt")
        rows = slice(rank // model_parallel * 8 // shards, (rank // model_parallel + 1) * 8 // shards)
        for name in ("rpp", "rpp_baseline", "gae"):
            torch.testing.assert_close(result[name], whole[name][rows], rtol=1e-6, atol=1e-6)
        # each shard counted once, not once per model-parallel replica
        assert result["counts"].tolist() == whole["counts"].tolist() == [26.0, 8.0]
        assert result["metrics"].keys() == whole["metrics"].keys()
        for key, value in whole["metrics"].items():
            assert result["metrics"][key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    # a shard whitened on its own would differ: the statistics really are global
    alone = dist_worker.statistics(dist_worker.shard(dist_worker.full_batch(), 0, 2), _whole)
    assert not torch.allclose(alone["rpp"], whole["rpp"][:4], atol=1e-3)


def _reduce_worker(rank: int, port: int, out: str) -> None:
    import os

    from dagrl.utils import dist

    os.environ.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
    )
    dist.init_process_group()
    metrics = {
        "response_length/mean": 10.0 * (rank + 1),
        "response_length/max": [7.0, 30.0][rank],
        "response_length/min": [2.0, 5.0][rank],
        "timing_s/gen": 1.0 + rank,
    }
    try:
        torch.save(dist.mean_over_ranks(metrics), f"{out}/rank{rank}.pt")
    finally:  # a process exiting with its gloo group alive can abort (terminate called without an active exception)
        torch.distributed.destroy_process_group()


def test_metric_means_over_ranks_keep_the_max_and_min_of_every_rank(tmp_path):
    mp.spawn(_reduce_worker, args=(free_port(), str(tmp_path)), nprocs=2)
    for rank in range(2):
        assert torch.load(tmp_path / f"rank{rank}.pt") == {
            "response_length/mean": 15.0,
            "response_length/max": 30.0,
            "response_length/min": 2.0,
            "timing_s/gen": 1.5,
        }


def _straggler_worker(rank: int, port: int, out: str) -> None:
    import os
    import time

    from dagrl.nodes.rollout import wait_for_the_slowest_rank
    from dagrl.utils import dist

    os.environ.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
    )
    dist.init_process_group()
    try:
        own = [0.1, 0.7][rank]  # rank 1 holds the long response
        time.sleep(own)
        start = time.perf_counter()
        spread = wait_for_the_slowest_rank(own)
        torch.save({"spread": spread, "waited": time.perf_counter() - start}, f"{out}/rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


def test_the_rollout_node_waits_for_the_slowest_rank_and_reports_the_spread(tmp_path):
    """The wait for a straggler belongs to generation: without it the fast rank's wait surfaced in the next node
    holding a collective (the scorer), which the rank mean then reported as seconds of reward."""
    mp.spawn(_straggler_worker, args=(free_port(), str(tmp_path)), nprocs=2)
    fast, slow = (torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2))
    assert fast["spread"] == slow["spread"] == pytest.approx(0.6)
    assert fast["waited"] > 0.4 and slow["waited"] < 0.3  # the fast rank waited inside the rollout node
