"""Pre-flight of data.*: the lengths (against the model's positions), the data files and what scores their rows
(custom_reward_function.path, or the built-in scorers their data_source names), the batch against the rows."""

from __future__ import annotations

import os

from dagrl.config import model_shapes
from dagrl.config.checks import alias, as_config_error, as_list, positive_int
from dagrl.config.errors import require
from dagrl.config.preflight.reward import check_extra_info_reads, check_score_returns
from dagrl.config.tree import Cfg


def check_lengths(cfg: Cfg) -> tuple[int, int]:
    prompt_length = alias(cfg, "data.max_prompt_length", "actor_rollout_ref.rollout.prompt_length")
    response_length = alias(cfg, "data.max_response_length", "actor_rollout_ref.rollout.response_length")
    positive_int(cfg, "data.max_prompt_length")
    positive_int(cfg, "data.max_response_length")
    return prompt_length, response_length


def check_empty_paths(cfg: Cfg) -> None:
    """An empty path (an unset shell variable: `data.val_files=$VAL`) would read as "none": a run with no validation
    or scored by the built-in scorers, as data.train_files= is refused for."""
    for key, value, none in (
        ("data.val_files", cfg.data.val_files, "data.val_files=null for no validation"),
        ("custom_reward_function.path", cfg.custom_reward_function.path, "drop it for the built-in scorers"),
    ):
        require(
            value != "",
            key,
            f"{key} is empty (an unset shell variable?): point it at "
            f"{'a parquet file' if key.startswith('data.') else 'the .py file of your reward function'}, or {none}",
        )


def check_position_limit(total: int, hf_config: dict) -> None:
    """A prompt + response longer than the model's positions (max_position_embeddings, x a rope scaling factor)."""
    limit = model_shapes.position_limit(hf_config)
    require(
        not isinstance(limit, int) or total <= limit,
        "data.max_response_length",
        f"data.max_prompt_length + data.max_response_length = {total} is longer than the model's "
        f"max_position_embeddings={limit} (config.json of actor_rollout_ref.model.path): lower "
        f"data.max_prompt_length or data.max_response_length",
    )


def _same_bytes(a: str, b: str) -> bool:
    """Whether two files hold the same bytes: sizes first, so only a same-sized pair is read."""
    import filecmp

    return os.path.getsize(a) == os.path.getsize(b) and filecmp.cmp(a, b, shallow=False)


def check_held_out(train_files: list[str], val_files: list[str]) -> None:
    """A validation file that is also a training file (`VAL=$TRAIN`, a copied line, or `cp train.parquet
    val.parquet`): val-core/* would score prompts the run trains on, and read as generalisation."""
    trained = {os.path.realpath(os.path.expanduser(path)): path for path in train_files}
    both = [path for path in val_files if os.path.realpath(os.path.expanduser(path)) in trained]
    require(
        not both,
        "data.val_files",
        f"data.val_files has {both[0] if both else ''} which data.train_files also names: validation would score "
        f"the prompts the run trains on; point data.val_files at held-out rows (e.g. the test.parquet "
        f"examples/data_preprocess/*.py write), or data.val_files=null for no validation",
    )
    for val in val_files:
        copy = next((train for real, train in trained.items() if _same_bytes(os.path.expanduser(val), real)), None)
        require(
            copy is None,
            "data.val_files",
            f"data.val_files has {val}, a byte-for-byte copy of {copy} in data.train_files: validation would score "
            f"the prompts the run trains on; point data.val_files at held-out rows (e.g. the test.parquet "
            f"examples/data_preprocess/*.py write), or data.val_files=null for no validation",
        )


def check_paths(cfg: Cfg) -> int:
    """The data files (footers), the custom reward function, and that every row can be scored (the data_source
    and reward_model columns only are read: a run whose rows all score 0 would train nothing)."""
    from dagrl.data.checks import check_data_files, check_reward_inputs

    train_files = cfg.data.train_files
    require(bool(train_files), "data.train_files", "data.train_files is not set: point it at a parquet file")
    with as_config_error("data.train_files"):
        rows = check_data_files(as_list(train_files), cfg.data.prompt_key)
    if cfg.data.val_files:
        with as_config_error("data.val_files"):
            check_data_files(as_list(cfg.data.val_files), cfg.data.prompt_key)
        check_held_out(as_list(train_files), as_list(cfg.data.val_files))
    custom = cfg.custom_reward_function
    require(
        not (custom.path and os.path.isdir(os.path.expanduser(custom.path))),
        "custom_reward_function.path",
        f"custom_reward_function.path={custom.path} is a directory: point it at the .py file that defines "
        f"{custom.name or 'compute_score'} (e.g. {str(custom.path).rstrip('/')}/reward.py)",
    )
    if custom.path:
        from dagrl.reward.custom import read_custom_reward_fn

        with as_config_error("custom_reward_function.path"):
            function = read_custom_reward_fn(custom.path, custom.name, custom.reward_kwargs.to_dict())
        check_extra_info_reads(cfg, function, as_list(train_files) + as_list(cfg.data.val_files or []))
        check_score_returns(cfg, function)
        known = None  # the user's function decides what it scores
    else:
        from dagrl.reward.scorers import SCORER_BY_DATA_SOURCE

        known = tuple(SCORER_BY_DATA_SOURCE)
    with as_config_error("data.train_files"):
        check_reward_inputs(as_list(train_files), known)
    if cfg.data.val_files:
        with as_config_error("data.val_files"):
            check_reward_inputs(as_list(cfg.data.val_files), known)
    return rows


def check_data(cfg: Cfg) -> int:
    train_rows = check_paths(cfg)
    require(
        train_rows >= cfg.data.train_batch_size,
        "data.train_batch_size",
        f"data.train_batch_size={cfg.data.train_batch_size} is larger than the {train_rows} training rows: set it "
        f"to at most {train_rows}, or add rows to data.train_files",
    )
    return train_rows
