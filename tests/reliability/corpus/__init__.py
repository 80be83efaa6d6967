"""The bad-input corpus, one module per topic; docs/bad_inputs.md lists it in this order, one table per topic.

case.py says what a case is; texts.py and the *_makers modules write the files the cases need. A new case goes into
its topic's module: its `found` field says when it shows, not where it belongs.
"""

from __future__ import annotations

import importlib

from tests.reliability.corpus.case import PREFLIGHT, RUNTIME, STARTUP, Case, Paths

# the topic modules, in the order of docs/bad_inputs.md; each module's TOPIC heads its table
MODULES = (
    "command_line",
    "hydra_grammar",
    "interpolations",
    "value_types",
    "value_ranges",
    "switched_off",
    "model",
    "model_dirs",
    "quantized_weights",
    "data_files",
    "data_rows",
    "layout",
    "algorithm",
    "train_nothing",
    "lora",
    "fp8",
    "off_policy",
    "reward",
    "reward_manager",
    "async_training",
    "multi_turn",
    "distillation",
    "graph",
    "user_code",
    "checkpoints",
    "run_directory",
    "output_dirs",
    "profiler",
    "launchers",
    "environment",
    "numerics",
    "other_trainers",
    "transformer_config",
    "next_to_nothing",
    "splits_and_scores",
    "held_out_data",
    "several_mistakes",
)
TOPICS: dict[str, tuple[Case, ...]] = {
    module.TOPIC: module.CASES for module in (importlib.import_module(f"{__name__}.{name}") for name in MODULES)
}
CASES: tuple[Case, ...] = tuple(case for cases in TOPICS.values() for case in cases)

__all__ = ["CASES", "PREFLIGHT", "RUNTIME", "STARTUP", "TOPICS", "Case", "Paths"]
