"""A seeded, resumable sampler of global batches of dataset row indices.

Every rank builds the same sampler and gets the same global batch; each then takes its own slice (`rank_share`)
and reads and tokenizes only those rows. The order is verl's, so the same data and `data.seed` give the batches
verl gives: verl's torchdata `RandomSampler` permutes with a CPU `torch.Generator` seeded with `data.seed`, and its
`StatefulDataLoader` with worker processes (verl's default `data.dataloader_num_workers=8`) draws two permutations
an epoch and uses the second, so epoch `e` is the `2e+1`-th `torch.randperm` (from 0; order "verl_workers", measured
against verl 0.9.1's batches on a GPU and tested against torchdata). The order depends only on (seed, epoch): a
resumed run only needs the global position (epoch, step within the epoch) to continue with the same indices. A
checkpoint resumes in the order it was written with: "verl" (one permutation an epoch: verl's loader without workers,
and dagrl's order before "verl_workers") or, with no "order" in its state, numpy's `default_rng([seed, e])`.
The last incomplete batch of an epoch is dropped, so every batch has exactly `batch_size` rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

ORDERS = ("verl_workers", "verl", "numpy")  # new runs: the first; the others resume older checkpoints
DRAWS = {"verl_workers": 2, "verl": 1}  # torch.randperm calls an epoch, the last one used


def rank_share(batch_size: int, rank: int, ranks: int) -> np.ndarray:
    """Positions in a global batch that rollout-DP rank `rank` of `ranks` takes: the `rank`-th contiguous
    1/ranks of it. Every rank draws the same global batch, so the shares partition it without communication."""
    if batch_size % ranks:
        raise ValueError(f"a global batch of {batch_size} does not split over {ranks} rollout-DP ranks")
    per_rank = batch_size // ranks
    return np.arange(rank * per_rank, (rank + 1) * per_rank, dtype=np.int64)


class EpochSampler:
    """Yields `(epoch, indices)` global batches, epoch after epoch, without end."""

    def __init__(
        self, num_rows: int, batch_size: int, seed: int = 0, shuffle: bool = True, order: str = ORDERS[0]
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"data.train_batch_size must be positive, got {batch_size}")
        if batch_size > num_rows:
            raise ValueError(
                f"data.train_batch_size={batch_size} is larger than the dataset ({num_rows} rows); "
                f"lower data.train_batch_size or use more data"
            )
        self.num_rows = int(num_rows)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.shuffle = bool(shuffle)
        if order not in ORDERS:
            raise ValueError(f"unknown prompt order {order!r}; known: {', '.join(ORDERS)}")
        self.order = order
        self._drawn: tuple[int, torch.Generator, np.ndarray] | None = None  # verl orders: (epoch, generator, order)
        self.epoch = 0  # the epoch of the next batch
        self.step_in_epoch = 0  # how many batches of that epoch were already handed out
        self._order: np.ndarray | None = None  # cached permutation of `self.epoch`

    @property
    def steps_per_epoch(self) -> int:
        return self.num_rows // self.batch_size

    def epoch_order(self, epoch: int) -> np.ndarray:
        """All row indices in the order epoch `epoch` visits them."""
        if not self.shuffle:
            return np.arange(self.num_rows, dtype=np.int64)
        if self.order == "numpy":
            return np.random.default_rng([self.seed, int(epoch)]).permutation(self.num_rows).astype(np.int64)
        if self._drawn is None or self._drawn[0] > epoch:  # epochs come in order: each costs one more draw
            generator = torch.Generator()
            generator.manual_seed(self.seed)
            self._drawn = (-1, generator, np.empty(0, dtype=np.int64))
        drawn, generator, order = self._drawn
        while drawn < epoch:
            for _ in range(DRAWS[self.order]):
                order = torch.randperm(self.num_rows, generator=generator).numpy().astype(np.int64)
            drawn += 1
        self._drawn = (drawn, generator, order)
        return order.copy()

    def next_batch(self) -> tuple[int, np.ndarray]:
        """The next global batch: its epoch and `batch_size` row indices."""
        if self.step_in_epoch >= self.steps_per_epoch:
            self.epoch += 1
            self.step_in_epoch = 0
            self._order = None
        if self._order is None:
            self._order = self.epoch_order(self.epoch)
        start = self.step_in_epoch * self.batch_size
        indices = self._order[start : start + self.batch_size].copy()
        self.step_in_epoch += 1
        return self.epoch, indices

    def __iter__(self) -> "EpochSampler":
        return self

    def __next__(self) -> tuple[int, np.ndarray]:
        return self.next_batch()

    # ---- checkpointing ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "step_in_epoch": self.step_in_epoch,
            "num_rows": self.num_rows,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "order": self.order,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continues from a saved position. The data and batch settings must match the saved ones, else the
        resumed run would silently visit different rows."""
        saved = (state["num_rows"], state["batch_size"], state["seed"], state["shuffle"])
        current = (self.num_rows, self.batch_size, self.seed, self.shuffle)
        if saved != current:
            raise ValueError(
                f"sampler checkpoint was written for (rows, batch_size, seed, shuffle)={saved}, "
                f"this run has {current}; resume with the same data and data.train_batch_size / "
                f"data.seed / data.shuffle, or start a new run in another trainer.default_local_dir"
            )
        order = state.get("order", "numpy")
        if order not in ORDERS:
            raise ValueError(
                f"sampler checkpoint has order {order!r}, which this dagrl does not know "
                f"(known: {', '.join(ORDERS)}); resume it with the dagrl version that wrote it"
            )
        self.order = order
        self.epoch = int(state["epoch"])
        self.step_in_epoch = int(state["step_in_epoch"])
        self._order = None
