"""Placement's pools: which global ranks form the rollout and training pools, and the pool-local environment
each process initialises its own default process group with."""

import pytest

from dagrl.placement import Placement


def test_colocated_is_one_pool_doing_both():
    placement = Placement.colocated(nnodes=2, per_node=4)
    assert placement.is_colocated and placement.world_size == 8
    assert placement.pool("rollout") is placement.pool("train") is placement.pool_of(7)
    assert placement.pool_of(5).local_env(5) == {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
        "DAGRL_POOL": "colocated",
    }


def test_two_pools_split_the_ranks_and_number_them_from_zero_each():
    placement = Placement.split(rollout_nodes=1, rollout_per_node=2, train_nodes=2, train_per_node=2)
    assert not placement.is_colocated and placement.world_size == 6
    rollout, train = placement.pool("rollout"), placement.pool("train")
    assert list(rollout.ranks) == [0, 1] and list(train.ranks) == [2, 3, 4, 5]
    assert [placement.pool_of(r).name for r in range(6)] == ["rollout"] * 2 + ["train"] * 4
    assert train.local_env(5) == {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "DAGRL_POOL": "train",
    }
    with pytest.raises(ValueError, match="not in the rollout pool"):
        rollout.local_env(2)
    with pytest.raises(ValueError, match="outside the 6 ranks"):
        placement.pool_of(6)
