"""benchmarks/agentic_call_rate.py without a model: its arguments (--task, --greedy, --variants), the overrides of its
validation-only runs, and the table line read from a step-0 metrics row."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import agentic_call_rate  # noqa: E402 - after the sys.path insert above


def test_greedy_runs_one_answer_per_prompt_and_sampled_runs_n(tmp_path):
    args, extra = agentic_call_rate.parse_args(
        ["--model", "m", "--task", "marbles", "--greedy", "--variants", "turns", "--", "trainer.seed=3"]
    )
    assert args.variants == ["turns"] and extra == ["trainer.seed=3"]
    greedy = agentic_call_rate.overrides(args, tmp_path / "d", tmp_path / "o")
    assert {
        "actor_rollout_ref.rollout.val_kwargs.n=1",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=false",
        "trainer.val_only=true",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        f"data.val_files={tmp_path / 'd'}/test.parquet",
    } <= set(greedy)
    args, _ = agentic_call_rate.parse_args(["--model", "m", "--n", "4", "--temperature", "0.7", "--rollout", "hf"])
    assert args.task == "products" and args.variants == ["turns", "system"]
    sampled = agentic_call_rate.overrides(args, tmp_path / "d", tmp_path / "o")
    assert {
        "actor_rollout_ref.rollout.val_kwargs.n=4",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        "actor_rollout_ref.rollout.val_kwargs.temperature=0.7",
        "actor_rollout_ref.rollout.name=hf",
    } <= set(sampled)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--task", "nosuch"], "no examples/data_preprocess/nosuch.py"),
        (["--variants", "turns,chat"], "--variants: unknown ['chat']"),
    ],
)
def test_bad_task_or_variant_is_a_usage_error(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        agentic_call_rate.parse_args(["--model", "m", *argv])
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_table_line_reads_the_tasks_accuracy_and_the_multi_turn_metrics():
    row = {
        "step": 0,
        "val-core/dagrl/marbles/acc/mean@4": 0.25,
        "val-core/dagrl/products/acc/mean@4": 0.9,
        "val-aux/multi_turn/valid_call_ratio": 0.5,
        "val-aux/multi_turn/tool_calls/mean": 0.75,
        "val-aux/multi_turn/num_turns/mean": 2.5,
        "val-aux/multi_turn/truncated_ratio": 0.125,
    }
    assert agentic_call_rate.table_line("system", row, "marbles").split() == [
        "examples",
        "in",
        "system",
        "0.500",
        "0.75",
        "2.50",
        "0.250",
        "0.125",
    ]
