from __future__ import annotations

import shutil
from pathlib import Path

from tests.reliability.corpus.case import WORLD, Case, Paths
from tests.reliability.corpus.file_makers import text_file

REWARD_ELSE_FORGOTTEN = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    if solution_str.strip() == ground_truth:\n"
    "        return 1.0\n"
)
REWARD_BARE_RETURN = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    if not solution_str:\n"
    "        return\n"
    "    return float(solution_str.strip() == ground_truth)\n"
)
REWARD_TRY_PASS = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    try:\n"
    "        return float(int(solution_str) == int(ground_truth))\n"
    "    except ValueError:\n"
    "        pass\n"
)
REWARD_RETURNS_TEXT = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    return '1.0' if solution_str.strip() == ground_truth else '0.0'\n"
)


def split_dir(ws: Path, paths: Paths) -> None:
    """{ws}/gsm8k: what examples/data_preprocess/*.py write, train.parquet beside test.parquet."""
    (ws / "gsm8k").mkdir()
    for name in ("train.parquet", "test.parquet"):
        shutil.copy(paths.train, ws / "gsm8k" / name)


def hub_split_dir(ws: Path, paths: Paths) -> None:
    """{ws}/data: a hub snapshot's data/ folder, its splits sharded as <split>-0000N-of-0000M.parquet."""
    (ws / "data").mkdir()
    for name in ("train-00000-of-00002.parquet", "train-00001-of-00002.parquet", "validation-00000-of-00001.parquet"):
        shutil.copy(paths.train, ws / "data" / name)


TOPIC = "Held-out splits and scorers without a score"
CASES: tuple[Case, ...] = (
    Case(
        "train_files_split_dir",
        "`data.train_files` names the folder the preprocess scripts write (train.parquet and test.parquet): listing "
        "its files would train on the held-out split",
        ("data.train_files={ws}/gsm8k",),
        (
            "'<tmp>/gsm8k' is a directory holding a data set's splits (test.parquet, train.parquet)",
            "data.train_files=<tmp>/gsm8k/train.parquet data.val_files=<tmp>/gsm8k/test.parquet",
        ),
        make=split_dir,
    ),
    Case(
        "val_files_same_as_train",
        "`data.val_files` names the training file too (`VAL=$TRAIN`): validation would score trained prompts",
        ("data.val_files={train}",),
        ("data.val_files has <data>/train.parquet which data.train_files also names", "held-out rows"),
    ),
    Case(
        "val_files_hub_split_dir",
        "`data.val_files` names a hub snapshot's data/ folder (train-0000N-of-00002.parquet and "
        "validation-00000-of-00001.parquet)",
        ("data.val_files={ws}/data",),
        (
            "'<tmp>/data' is a directory holding a data set's splits",
            "data.train_files='[<tmp>/data/train-00000-of-00002.parquet,<tmp>/data/train-00001-of-00002.parquet]'",
            "data.val_files=<tmp>/data/validation-00000-of-00001.parquet",
        ),
        make=hub_split_dir,
    ),
    Case(
        "reward_else_forgotten",
        "a custom reward function returns 1.0 for a right answer and nothing otherwise (None for every wrong one)",
        ("custom_reward_function.path={ws}/reward.py",),
        (
            "compute_score in '<tmp>/reward.py' can run past its last line (3) and return None",
            "end it with `return 0.0`",
        ),
        make=text_file("reward.py", REWARD_ELSE_FORGOTTEN),
    ),
    Case(
        "reward_bare_return",
        "a custom reward function leaves an empty response with a bare `return`",
        ("custom_reward_function.path={ws}/reward.py",),
        ("compute_score in '<tmp>/reward.py' returns None at line 3", "return a float"),
        make=text_file("reward.py", REWARD_BARE_RETURN),
    ),
    Case(
        "reward_except_pass",
        "a custom reward function swallows a non-number answer with `except ValueError: pass` (None for it)",
        ("custom_reward_function.path={ws}/reward.py",),
        ("compute_score in '<tmp>/reward.py' can run past its last line (5) and return None",),
        make=text_file("reward.py", REWARD_TRY_PASS),
    ),
    Case(
        "reward_returns_text",
        "a custom reward function returns '1.0' / '0.0' (strings) instead of numbers",
        ("custom_reward_function.path={ws}/reward.py",),
        ("compute_score in '<tmp>/reward.py' returns a str at line 2", "return 1.0, not '1.0'"),
        make=text_file("reward.py", REWARD_RETURNS_TEXT),
    ),
    Case(
        "world_size_left_exported",
        "`WORLD_SIZE=2` left exported from another job, one process started for a one-GPU run",
        (),
        ("environment has WORLD_SIZE=2 without torchrun's LOCAL_RANK", "unset WORLD_SIZE"),
        env=WORLD,
    ),
)
