"""Each preprocessing script, run as users run it, on small local source files (no hub)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dagrl.data.checks import check_data_files
from dagrl.data.dataset import PromptDataset

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "examples", "data_preprocess")
GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
BOXED_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def run_script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, os.path.join(SCRIPTS, name), *args], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


def read_split(directory, split: str) -> list[dict]:
    table = pq.read_table(os.path.join(directory, f"{split}.parquet"))
    assert set(table.schema.names) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert table.schema.field("prompt").type == pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    rows = table.to_pylist()
    for index, row in enumerate(rows):
        assert row["reward_model"]["style"] == "rule"
        assert row["extra_info"]["split"] == split and row["extra_info"]["index"] == index
        assert {"answer", "question"} <= set(row["extra_info"])
    return rows


def write_jsonl(path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


GSM8K_ROWS = [
    {
        "question": f"Tom has {i} apples and buys 1,000 more. How many?",
        "answer": f"{i} + 1000 = {i + 1000}\n#### {i + 1000:,}",
    }
    for i in range(6)
]


def test_gsm8k_from_a_directory_with_train_and_test(tmp_path, tokenizer):
    source = tmp_path / "source"
    source.mkdir()
    write_jsonl(source / "train.jsonl", GSM8K_ROWS[:4])
    write_jsonl(source / "test.jsonl", GSM8K_ROWS[4:])
    out = tmp_path / "out"
    result = run_script("gsm8k.py", "--source_dir", str(source), "--local_dir", str(out))
    assert result.returncode == 0, result.stderr
    train, test = read_split(out, "train"), read_split(out, "test")
    assert len(train) == 4 and len(test) == 2
    assert train[1]["data_source"] == "openai/gsm8k"
    assert train[1]["prompt"] == [{"role": "user", "content": f"{GSM8K_ROWS[1]['question']} {GSM8K_INSTRUCTION}"}]
    assert train[1]["reward_model"]["ground_truth"] == "1001"
    assert test[0]["extra_info"]["question"] == GSM8K_ROWS[4]["question"]
    assert test[0]["extra_info"]["answer"] == GSM8K_ROWS[4]["answer"]
    # what the script writes is what the trainer reads
    assert check_data_files([str(out / "train.parquet"), str(out / "test.parquet")], "prompt") == 6
    assert len(PromptDataset([str(out / "train.parquet")], tokenizer, 256, "error", False).rows([0, 3])) == 2


def test_gsm8k_missing_field_is_a_one_line_error_with_exit_code_2(tmp_path):
    source = write_jsonl(tmp_path / "broken.jsonl", [GSM8K_ROWS[0], {"question": "no answer here"}] + GSM8K_ROWS[1:])
    result = run_script("gsm8k.py", "--source_dir", source, "--local_dir", str(tmp_path / "out"))
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "'answer'" in errors[0] and "row 1" in errors[0] and source in errors[0]
    assert "Traceback" not in result.stderr


def test_math_from_a_single_json_file_holds_out_test(tmp_path):
    rows = [
        {"problem": f"Compute {i}/2.", "solution": f"It is $\\boxed{{\\frac{{{i}}}{{2}}}}$.", "level": "1"}
        for i in range(1, 11)
    ]
    rows.append({"problem": "Given directly.", "answer": "42"})
    source = tmp_path / "math.json"
    source.write_text(json.dumps(rows))
    out = tmp_path / "out"
    result = run_script("math_dataset.py", "--source_dir", str(source), "--local_dir", str(out), "--test_size", "3")
    assert result.returncode == 0, result.stderr
    train, test = read_split(out, "train"), read_split(out, "test")
    assert len(train) == 8 and len(test) == 3
    all_rows = train + test
    questions = {r["extra_info"]["question"] for r in all_rows}
    assert len(questions) == 11  # disjoint and complete
    by_question = {r["extra_info"]["question"]: r for r in all_rows}
    assert by_question["Compute 4/2."]["reward_model"]["ground_truth"] == "\\frac{4}{2}"
    assert by_question["Given directly."]["reward_model"]["ground_truth"] == "42"
    assert by_question["Compute 4/2."]["prompt"][0]["content"].endswith(BOXED_INSTRUCTION)
    assert all(r["data_source"] == "DigitalLearningGmbH/MATH-lighteval" for r in all_rows)


def test_math_without_a_boxed_answer_fails_clearly(tmp_path):
    source = write_jsonl(tmp_path / "m.jsonl", [{"problem": "p", "solution": "no box"}] * 3)
    result = run_script("math_dataset.py", "--source_dir", source, "--local_dir", str(tmp_path / "out"))
    assert result.returncode == 2 and "boxed" in result.stderr


def test_deepscaler_from_parquet(tmp_path):
    rows = [{"problem": f"Find {i}^2.", "answer": str(i * i), "solution": "..."} for i in range(20)]
    source = str(tmp_path / "deepscaler.parquet")
    pq.write_table(pa.Table.from_pylist(rows), source)
    out = tmp_path / "out"
    result = run_script("deepscaler.py", "--source_dir", source, "--local_dir", str(out))
    assert result.returncode == 0, result.stderr
    train, test = read_split(out, "train"), read_split(out, "test")
    assert len(train) == 18 and len(test) == 2  # default hold-out: 10%
    row = train[0]
    assert row["data_source"] == "agentica-org/DeepScaleR-Preview-Dataset"
    assert row["reward_model"]["ground_truth"] == str(int(row["extra_info"]["question"][5:-3]) ** 2)
    bad = str(tmp_path / "bad.parquet")
    pq.write_table(pa.Table.from_pylist([{"problem": "p"}] * 3), bad)
    result = run_script("deepscaler.py", "--source_dir", bad, "--local_dir", str(tmp_path / "bad_out"))
    assert result.returncode == 2 and "'answer'" in result.stderr


def test_arithmetic_generator_disjoint_and_deterministic(tmp_path):
    out, again = tmp_path / "a", tmp_path / "b"
    for directory in (out, again):
        result = run_script(
            "arithmetic.py", "--local_dir", str(directory), "--max_operand", "9", "--test_size", "30", "--seed", "3"
        )
        assert result.returncode == 0, result.stderr
    train, test = read_split(out, "train"), read_split(out, "test")
    assert len(train) == 70 and len(test) == 30
    assert not {r["extra_info"]["question"] for r in train} & {r["extra_info"]["question"] for r in test}
    assert train == read_split(again, "train")
    row = test[0]
    assert row["data_source"] == "dagrl/arithmetic"
    assert row["prompt"][0] == {"role": "system", "content": "Answer with only the final number."}
    a, b = (int(x) for x in row["prompt"][1]["content"][len("What is ") : -1].split(" + "))
    assert row["reward_model"]["ground_truth"] == str(a + b) and 0 <= a <= 9 and 0 <= b <= 9


def test_arithmetic_rejects_a_test_split_larger_than_the_problem_set(tmp_path):
    result = run_script("arithmetic.py", "--local_dir", str(tmp_path), "--max_operand", "3", "--test_size", "16")
    assert result.returncode == 2 and "--test_size" in result.stderr


def test_one_row_source_says_no_training_rows_would_be_left(tmp_path):
    """The held-out split (common.hold_out_test, shared by every preprocessor) explains a source too small to split,
    instead of "--test_size 1 must be between 1 and 0"."""
    source = write_jsonl(tmp_path / "one.jsonl", GSM8K_ROWS[:1])
    result = run_script("gsm8k.py", "--source_dir", source, "--local_dir", str(tmp_path / "out"))
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "the source has 1 row " in errors[0] and "leaves no training rows" in errors[0], errors[0]
    assert "between 1 and 0" not in errors[0]
    source = write_jsonl(tmp_path / "three.jsonl", GSM8K_ROWS[:3])
    result = run_script("gsm8k.py", "--source_dir", source, "--local_dir", str(tmp_path / "out"), "--test_size", "3")
    assert result.returncode == 2, result.stderr
    assert (
        "the source has 3 rows: --test_size 3 leaves no training rows; lower --test_size to at most 2" in result.stderr
    )


@pytest.mark.parametrize("script", ["gsm8k.py", "math_dataset.py", "deepscaler.py"])
def test_missing_source_is_exit_code_2(tmp_path, script):
    result = run_script(script, "--source_dir", str(tmp_path / "nothing.jsonl"), "--local_dir", str(tmp_path / "o"))
    assert result.returncode == 2 and "does not exist" in result.stderr
