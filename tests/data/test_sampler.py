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


@pytest.mark.parametrize(
    "rows,batch_size,seed,workers,order",
    [(272, 32, 0, 2, "verl_workers"), (10, 3, 7, 1, "verl_workers"), (256, 32, 1, 0, "verl"), (10, 3, 7, 0, "verl")],
)
def test_batches_are_verls_for_the_same_data_seed(rows, batch_size, seed, workers, order):
    """verl 0.9.1's train loader (verl.trainer.ppo.utils.create_rl_sampler + ray_trainer): torchdata's
    StatefulDataLoader over torchdata's RandomSampler with a torch.Generator seeded by data.seed, drop_last. With
    worker processes (verl's default data.dataloader_num_workers=8) the loader draws two permutations an epoch and
    uses the second: dagrl's default order; without workers one ("verl", the order of older checkpoints). The first
    case is the GPU run's data (272 rows, seed 0), whose step-1 batch verl logged."""
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader.sampler import RandomSampler

    data = list(range(rows))
    generator = torch.Generator()
    generator.manual_seed(seed)
    loader = StatefulDataLoader(
        dataset=data,
        batch_size=batch_size,
        drop_last=True,
        collate_fn=list,
        num_workers=workers,
        sampler=RandomSampler(data_source=data, generator=generator),
    )
    verl = [(epoch, batch) for epoch in range(3) for batch in loader]
    assert take(EpochSampler(rows, batch_size, seed, True, order=order), len(verl)) == verl
    other = "verl" if order == "verl_workers" else "verl_workers"
    assert take(EpochSampler(rows, batch_size, seed, True, order=other), len(verl)) != verl
    if workers:
        assert EpochSampler(rows, batch_size, seed, True).order == order  # new runs draw verl's default


def test_a_checkpoint_of_the_one_draw_order_resumes_in_that_order():
    """Checkpoints of dagrl before "verl_workers" carry order "verl": they continue with one permutation an epoch."""
    reference = take(EpochSampler(11, 4, 3, True, order="verl"), 8)
    first = EpochSampler(11, 4, 3, True, order="verl")
    head = take(first, 3)
    resumed = EpochSampler(11, 4, 3, True)
    resumed.load_state_dict(first.state_dict())
    assert resumed.order == "verl" and head + take(resumed, 5) == reference


def test_a_checkpoint_of_the_numpy_order_resumes_in_that_order():
    """Checkpoints written before the verl order carry no "order": they continue with the order they began."""
    reference = take(EpochSampler(11, 4, 3, True, order="numpy"), 6)
    first = EpochSampler(11, 4, 3, True, order="numpy")
    head = take(first, 2)
    state = {k: v for k, v in first.state_dict().items() if k != "order"}
    resumed = EpochSampler(11, 4, 3, True)
    resumed.load_state_dict(state)
    assert head + take(resumed, 4) == reference
    assert reference != take(EpochSampler(11, 4, 3, True), 6)  # the two orders differ
    with pytest.raises(ValueError, match="does not know"):
        EpochSampler(11, 4, 3, True).load_state_dict({**state, "order": "other"})
    with pytest.raises(ValueError, match="unknown prompt order"):
        EpochSampler(11, 4, 3, True, order="other")
