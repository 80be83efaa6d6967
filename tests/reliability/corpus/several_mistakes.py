from __future__ import annotations

from tests.reliability.corpus.case import MEGATRON, Case

TOPIC = "Several independent mistakes: one line each, in check order"
CASES: tuple[Case, ...] = (
    Case(
        "two_mistakes_type_and_data",
        "`trainer.total_epochs=two` and a data.train_files that names no file",
        ("trainer.total_epochs=two", "data.train_files={ws}/missing.parquet"),
        ("trainer.total_epochs='two'", "positive integer"),
        also=(("<tmp>/missing.parquet", "does not exist", "data.train_files"),),
    ),
    Case(
        "three_mistakes_layout_and_values",
        "`temperature=0`, TP=2 on a 1-process launch and `reward_model.timeout_s=0`",
        (
            "actor_rollout_ref.rollout.temperature=0",
            f"{MEGATRON}.tensor_model_parallel_size=2",
            "reward_model.timeout_s=0",
        ),
        ("actor_rollout_ref.rollout.temperature=0", "> 0"),
        also=(
            ("reward_model.timeout_s=0", "> 0"),
            ("1 is not divisible by 2", f"change {MEGATRON}.tensor_model_parallel_size"),
        ),
    ),
)
