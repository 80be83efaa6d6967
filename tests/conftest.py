"""Shared fixtures: a tiny chat model directory (random Llama + a trained BPE tokenizer) and arithmetic data."""
from __future__ import annotations

import multiprocessing.util
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from tests.helpers import make_row, make_tiny_tokenizer, write_parquet


@pytest.fixture(scope="session", autouse=True)
def private_tmpdir(tmp_path_factory) -> Iterator[Path]:
    """One temporary directory for the whole session, removed at its end: TMPDIR/TEMP/TMP point at it for this
    process and every process the tests start (they inherit os.environ), so what libraries leave in the temp
    directory (multiprocessing's pymp-*, torchelastic_*, Ray's ray/, wandb's tmp*wandb-media, ...), also from the
    processes a test kills, goes with it. Not under pytest's basetemp (kept as it is, for failed tests' files): that
    is 0700 and the sandbox's dropped uid must reach its scratch directory (dagrl.agent.sandbox); the short path also
    keeps Ray's socket paths under the AF_UNIX limit."""
    tmp_path_factory.getbasetemp()  # pytest's own directory stays where it was, under its retention policy
    multiprocessing.util.get_temp_dir()  # this process's, cached: multiprocessing removes it at exit, after us
    root = Path(tempfile.mkdtemp(prefix="dagrl-tests-"))
    root.chmod(0o1777)  # like /tmp: sticky, reachable by the sandbox's uid
    names = ("TMPDIR", "TEMP", "TMP")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update({name: str(root) for name in names})
    tempfile.tempdir = None  # gettempdir() caches its first answer: make it read TMPDIR again
    try:
        yield root
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        tempfile.tempdir = None
        shutil.rmtree(root, ignore_errors=True)


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
