from __future__ import annotations

from tests.reliability.corpus.case import Case
from tests.reliability.corpus.file_makers import folder, text_file

TOPIC = "Output directories (tensorboard, rollout and validation dumps, the data cache)"
CASES: tuple[Case, ...] = (
    Case(
        "tensorboard_dir_is_a_file",
        "`trainer.tensorboard_dir` names a file (tensorboard not in trainer.logger)",
        ("trainer.tensorboard_dir={ws}/a_file",),
        ("<tmp>/a_file is not a directory", "fix trainer.tensorboard_dir"),
        make=text_file("a_file", "x"),
    ),
    Case(
        "validation_dir_is_a_file",
        "`trainer.validation_data_dir` names a file",
        ("trainer.validation_data_dir={ws}/a_file",),
        ("<tmp>/a_file is not a directory", "fix trainer.validation_data_dir"),
        make=text_file("a_file", "x"),
    ),
    Case(
        "validation_dir_in_proc",
        "`trainer.validation_data_dir=/proc/val_dump`",
        ("trainer.validation_data_dir=/proc/val_dump",),
        ("trainer.validation_data_dir", "is not writable"),
    ),
    Case(
        "rollout_data_dir_under_a_file",
        "`trainer.rollout_data_dir` under a regular file",
        ("trainer.rollout_data_dir={ws}/a_file/rollouts",),
        ("<tmp>/a_file is not a directory", "fix trainer.rollout_data_dir"),
        make=text_file("a_file", "x"),
    ),
    Case(
        "rollout_dir_in_proc",
        "`trainer.rollout_data_dir=/proc/rollouts`",
        ("trainer.rollout_data_dir=/proc/rollouts",),
        ("trainer.rollout_data_dir", "is not writable"),
    ),
    Case(
        "data_cache_dir_is_a_file",
        "`data.cache_dir` names a regular file",
        ("data.cache_dir={ws}/a_file",),
        ("data.cache_dir=<tmp>/a_file", "fix data.cache_dir"),
        make=text_file("a_file", "x"),
    ),
    Case(
        "tensorboard_dir_not_writable",
        "`trainer.tensorboard_dir` under a regular file (with the tensorboard logger)",
        ("trainer.logger=[console,tensorboard]", "trainer.tensorboard_dir={ws}/a_file/tb"),
        ("trainer.tensorboard_dir", "<tmp>/a_file", "not a directory"),
        make=text_file("a_file", ""),
    ),
    Case(
        "validation_data_dir_not_writable",
        "`trainer.validation_data_dir` under a regular file",
        ("trainer.validation_data_dir={ws}/a_file/generations",),
        ("trainer.validation_data_dir", "<tmp>/a_file", "not a directory"),
        make=text_file("a_file", ""),
    ),
    Case(
        "data_cache_is_a_file",
        "a file named data_cache in trainer.default_local_dir",
        ("trainer.default_local_dir={ws}/run",),
        ("the data cache goes in <tmp>/run/data_cache, but <tmp>/run/data_cache is a file", "data.cache_dir"),
        make=text_file("run/data_cache", "x"),
    ),
    Case(
        "default_tensorboard_dir_is_a_file",
        "a file named tensorboard in trainer.default_local_dir (tensorboard logging on)",
        ("trainer.default_local_dir={ws}/run", "trainer.logger=[console,tensorboard]"),
        ("<tmp>/run/tensorboard is a file", "set trainer.tensorboard_dir to a folder"),
        make=text_file("run/tensorboard", "x"),
    ),
    Case(
        "metrics_jsonl_is_a_folder",
        "a folder named metrics.jsonl in trainer.default_local_dir (jsonl logging on)",
        ("trainer.default_local_dir={ws}/run",),
        ("the jsonl logger appends to <tmp>/run/metrics.jsonl, which is a folder", "trainer.default_local_dir"),
        make=folder("run/metrics.jsonl"),
    ),
)
