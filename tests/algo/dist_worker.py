"""A gloo worker for tests/algo/test_global_reductions.py: one rank of a world whose consecutive groups of
`model_parallel` ranks hold the same DP shard (as Megatron's model-parallel replicas do), computing batch
statistics on its shard."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch
import torch.distributed as dist

from dagrl.algo import advantage as estimators
from dagrl.algo.policy_loss import aggregation_counts
from dagrl.nodes.advantage import explained_variance
from dagrl.nodes.common import masked_stats
from dagrl.utils.dist import data_parallel_sums


def full_batch() -> dict[str, torch.Tensor | list]:
    """Eight responses in four groups of two; lengths 1-5 out of 5."""
    generator = torch.Generator().manual_seed(3)
    lengths = torch.tensor([5, 2, 4, 1, 3, 5, 2, 4])
    mask = (torch.arange(5).unsqueeze(0) < lengths.unsqueeze(1)).long()
    rewards = torch.zeros(8, 5)
    rewards[torch.arange(8), lengths - 1] = torch.rand(8, generator=generator)
    return {
        "rewards": rewards,
        "mask": mask,
        "values": torch.randn(8, 5, generator=generator) * mask,
        "uid": [f"g{i // 2}" for i in range(8)],
    }


def statistics(data: dict, reduce_sum) -> dict[str, torch.Tensor | dict]:
    """Everything whose value depends on batch-wide statistics."""
    rewards, mask = data["rewards"], data["mask"]
    rpp, rpp_returns = estimators.reinforce_plus_plus_advantage(rewards, mask, 0.9, reduce_sum)
    baseline, _ = estimators.reinforce_plus_plus_baseline_advantage(rewards, mask, data["uid"], reduce_sum)
    gae, gae_returns = estimators.gae_advantage(rewards, data["values"], mask, 0.9, 0.8, reduce_sum)
    return {
        "rpp": rpp,
        "rpp_baseline": baseline,
        "gae": gae,
        "counts": reduce_sum(aggregation_counts(mask)),
        "metrics": {
            **masked_stats("critic/advantages", gae, mask, reduce_sum),
            **masked_stats("critic/returns", rpp_returns, mask, reduce_sum),
            "critic/vf_explained_var": explained_variance(gae_returns, data["values"], mask, reduce_sum),
        },
    }


def shard(data: dict, index: int, shards: int) -> dict:
    """The `index`-th of `shards` equal row ranges (the eight rows keep their groups of two whole)."""
    size = len(data["uid"]) // shards
    return {key: value[index * size : (index + 1) * size] for key, value in data.items()}


def run(rank: int, world_size: int, model_parallel: int, port: int, out_dir: str) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        reduce_sum = functools.partial(data_parallel_sums, model_parallel_size=model_parallel)
        result = statistics(shard(full_batch(), rank // model_parallel, world_size // model_parallel), reduce_sum)
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()
