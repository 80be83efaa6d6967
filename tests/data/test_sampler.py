from __future__ import annotations

import numpy as np
import pytest

from dagrl.data.sampler import EpochSampler


def take(sampler: EpochSampler, count: int) -> list[tuple[int, list[int]]]:
    return [(epoch, indices.tolist()) for epoch, indices in (sampler.next_batch() for _ in range(count))]


def test_epochs_are_permutations_with_drop_last():
    sampler = EpochSampler(num_rows=10, batch_size=3, seed=7, shuffle=True)
    assert sampler.steps_per_epoch == 3
    batches = take(sampler, 6)
    assert [epoch for epoch, _ in batches] == [0, 0, 0, 1, 1, 1]
    for epoch in (0, 1):
        seen = sum((indices for e, indices in batches if e == epoch), [])
        assert len(seen) == 9 and len(set(seen)) == 9 and set(seen) <= set(range(10))
    assert batches[0][1] != batches[3][1]  # a new permutation each epoch


def test_same_seed_same_order_other_seed_other_order():
    assert take(EpochSampler(100, 10, 1, True), 15) == take(EpochSampler(100, 10, 1, True), 15)
    assert take(EpochSampler(100, 10, 1, True), 3) != take(EpochSampler(100, 10, 2, True), 3)


def test_no_shuffle_is_in_order():
    assert take(EpochSampler(5, 2, 0, False), 3) == [(0, [0, 1]), (0, [2, 3]), (1, [0, 1])]


@pytest.mark.parametrize("stop_after", [0, 2, 3, 5])
def test_resume_continues_with_exactly_the_same_indices(stop_after):
    reference = take(EpochSampler(11, 4, 3, True), 9)
    first = EpochSampler(11, 4, 3, True)
    head = take(first, stop_after)
    state = first.state_dict()
    resumed = EpochSampler(11, 4, 3, True)
    resumed.load_state_dict(state)
    assert head + take(resumed, 9 - stop_after) == reference


def test_resume_with_other_settings_is_refused():
    state = EpochSampler(11, 4, 3, True).state_dict()
    with pytest.raises(ValueError, match="data.train_batch_size"):
        EpochSampler(11, 5, 3, True).load_state_dict(state)


def test_batch_larger_than_dataset_is_an_error():
    with pytest.raises(ValueError, match="larger than the dataset"):
        EpochSampler(3, 4, 0, True)


def test_indices_are_int64_arrays():
    epoch, indices = EpochSampler(8, 4, 0, True).next_batch()
    assert epoch == 0 and isinstance(indices, np.ndarray) and indices.dtype == np.int64


def test_rank_shares_partition_the_global_batch_in_order():
    from dagrl.data.sampler import rank_share

    shares = [rank_share(12, rank, 3).tolist() for rank in range(3)]
    assert shares == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    with pytest.raises(ValueError, match="does not split"):
        rank_share(10, 0, 3)
