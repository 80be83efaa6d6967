"""The data section: each key's type, default, range, choices and doc (conf/data/default.yaml is written from it)."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.config.schema.spec import NON_NEGATIVE_INT, POSITIVE_INT, Files, OutDir, Section, key


@dataclass(frozen=True)
class Data(Section):
    """Prompts: parquet files in the verl/siiRL schema (data_source, prompt, ability, reward_model, extra_info)."""

    train_files: Files | None = key(None, "parquet file or list of files for training (required)")
    val_files: Files | None = key(None, "parquet file or list of files for validation; null = no validation")
    prompt_key: str = key("prompt", "column holding the chat list of {role, content}")
    max_prompt_length: int = key(
        512, "prompt tokens after the chat template (canonical; rollout.prompt_length is an alias)", POSITIVE_INT
    )
    max_response_length: int = key(
        512, "generated tokens per response (canonical; rollout.response_length is an alias)", POSITIVE_INT
    )
    train_batch_size: int = key(1024, "prompts per step, over all ranks (each gets rollout.n responses)", POSITIVE_INT)
    truncation: str = key(
        "error",
        "prompt longer than max_prompt_length: error | left | right | middle",
        choices=("error", "left", "right", "middle"),
    )
    filter_overlong_prompts: bool = key(False, "drop prompts longer than max_prompt_length when the dataset is loaded")
    cache_dir: OutDir | None = key(
        None, "Arrow copy of the data files that a machine's ranks memory-map; null = <default_local_dir>/data_cache"
    )
    shuffle: bool = key(True, "reshuffle the training prompts every epoch")
    seed: int = key(
        1, "seed of the prompt order, verl's order: same data and seed give verl's batches", NON_NEGATIVE_INT
    )
