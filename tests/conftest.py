"""Shared fixtures: a tiny chat model directory (random Llama + a trained BPE tokenizer) and arithmetic data."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.helpers import make_row, make_tiny_tokenizer, write_parquet


def make_arithmetic_rows(count: int, split: str, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        rows.append(make_row(index, f"What is {a} + {b}?", str(a + b), split=split))
    return rows


def make_tiny_model_dir(directory: Path, num_layers: int = 2, seed: int = 0) -> Path:
    """A random tiny Llama whose vocabulary matches the tiny tokenizer saved beside it."""
    from tests.engine.tiny_models import make_model_dir

    tokenizer = make_tiny_tokenizer(str(directory))
    make_model_dir(directory, family="llama", num_layers=num_layers, seed=seed, vocab_size=len(tokenizer))
    return directory


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    return make_tiny_model_dir(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("tiny_data")
    return {"train": write_parquet(str(root / "train.parquet"), make_arithmetic_rows(32, "train", seed=0)),
            "test": write_parquet(str(root / "test.parquet"), make_arithmetic_rows(8, "test", seed=1))}


def cpu_run_overrides(model: Path, data: dict[str, str], out: Path, **extra) -> list[str]:
    """Overrides for a seconds-long CPU run on the tiny model."""
    base = {
        "actor_rollout_ref.model.path": str(model),
        "data.train_files": data["train"], "data.val_files": data["test"],
        "data.train_batch_size": 4, "data.max_prompt_length": 32, "data.max_response_length": 6,
        "actor_rollout_ref.rollout.n": 2,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
        "actor_rollout_ref.actor.optim.lr": 1e-3,
        "trainer.total_training_steps": 2,
        "trainer.default_local_dir": str(out),
        "trainer.logger": "[console,jsonl]",
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]
