from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from dagrl.data.dataset import PromptDataset, check_data_files
from tests.helpers import make_row, write_parquet

QUESTIONS = ["What is 1 + 2?", "Natalia sold clips to 48 of her friends in April, and then she sold half as many.",
             "What is 7 + 12?"]


def template_ids(tokenizer, question: str) -> list[int]:
    text = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                         tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture()
def data_file(tmp_path):
    rows = [make_row(i, q, str(i)) for i, q in enumerate(QUESTIONS)]
    return write_parquet(str(tmp_path / "train.parquet"), rows)


def test_rows_left_pad_mask_and_positions_exact(tokenizer, data_file):
    lengths = [len(template_ids(tokenizer, q)) for q in QUESTIONS]
    width = max(lengths) + 3
    dataset = PromptDataset([data_file], tokenizer, max_prompt_length=width, truncation="error",
                            filter_overlong_prompts=False)
    assert len(dataset) == 3
    batch = dataset.rows([2, 0])
    assert batch["input_ids"].shape == (2, width) and batch["input_ids"].dtype == torch.long
    for row, question_index in enumerate([2, 0]):
        ids = template_ids(tokenizer, QUESTIONS[question_index])
        pad = width - len(ids)
        assert batch["input_ids"][row].tolist() == [tokenizer.pad_token_id] * pad + ids
        assert batch["attention_mask"][row].tolist() == [0] * pad + [1] * len(ids)
        assert batch["position_ids"][row].tolist() == [0] * pad + list(range(len(ids)))
    assert list(batch["index"]) == [2, 0]
    assert batch["reward_model"][0]["ground_truth"] == "2"
    assert batch["data_source"][1] == "dagrl/arithmetic"
    assert batch["extra_info"][0]["index"] == 2
    assert batch["raw_prompt"][1] == [{"role": "user", "content": QUESTIONS[0]}]
    assert batch["ability"][0] == "math"


def test_pads_with_eos_when_tokenizer_has_no_pad(tokenizer_without_pad, data_file):
    width = 200
    batch = PromptDataset([data_file], tokenizer_without_pad, width, "error", False).rows([0])
    pads = width - int(batch["attention_mask"][0].sum())
    assert pads > 0
    assert batch["input_ids"][0, :pads].tolist() == [tokenizer_without_pad.eos_token_id] * pads


@pytest.mark.parametrize("mode", ["left", "right", "middle"])
def test_truncation_modes_keep_the_right_tokens(tokenizer, data_file, mode):
    ids = template_ids(tokenizer, QUESTIONS[1])
    width = 11
    assert len(ids) > width
    batch = PromptDataset([data_file], tokenizer, width, mode, False).rows([1])
    expected = {"left": ids[-width:], "right": ids[:width], "middle": ids[:5] + ids[-6:]}[mode]
    assert batch["input_ids"][0].tolist() == expected
    assert batch["attention_mask"][0].tolist() == [1] * width
    assert batch["position_ids"][0].tolist() == list(range(width))


def test_truncation_error_names_file_row_and_fix(tokenizer, data_file):
    length = len(template_ids(tokenizer, QUESTIONS[1]))
    width = len(template_ids(tokenizer, QUESTIONS[0]))
    assert length > width
    dataset = PromptDataset([data_file], tokenizer, width, "error", False)
    dataset.rows([0])  # short rows are fine; only the overlong row fails, and only when asked for
    with pytest.raises(ValueError) as caught:
        dataset.rows([0, 1])
    message = str(caught.value)
    assert "\n" not in message
    for part in (data_file, "row 1", f"{length} tokens", "data.max_prompt_length", "data.truncation"):
        assert part in message


def test_filter_overlong_prompts_drops_rows(tokenizer, data_file):
    width = max(len(template_ids(tokenizer, q)) for q in (QUESTIONS[0], QUESTIONS[2]))
    dataset = PromptDataset([data_file], tokenizer, width, "error", filter_overlong_prompts=True)
    assert len(dataset) == 2
    batch = dataset.rows([0, 1])
    assert [e["index"] for e in batch["extra_info"]] == [0, 2]
    assert list(batch["index"]) == [0, 1]


def test_multiple_files_map_positions_to_rows(tokenizer, tmp_path):
    first = write_parquet(str(tmp_path / "a.parquet"),
                          [make_row(i, f"What is {i} + 1?", str(i + 1)) for i in range(2)])
    second = write_parquet(str(tmp_path / "b.parquet"),
                           [make_row(i, f"What is {i} + 5?", str(i + 5)) for i in range(3)])
    dataset = PromptDataset([first, second], tokenizer, 64, "error", False)
    assert len(dataset) == 5
    batch = dataset.rows(np.array([4, 0, 2]))
    assert [r["ground_truth"] for r in batch["reward_model"]] == ["7", "1", "5"]
    assert check_data_files([first, second], "prompt") == 5


def test_missing_optional_columns_are_filled(tokenizer, tmp_path):
    row = make_row(0, "What is 1 + 1?", "2")
    del row["extra_info"], row["ability"]
    path = write_parquet(str(tmp_path / "minimal.parquet"), [row])
    batch = PromptDataset([path], tokenizer, 64, "error", False).rows([0])
    assert batch["extra_info"][0] == {} and batch["ability"][0] is None


def test_custom_prompt_key(tokenizer, tmp_path):
    row = make_row(0, "What is 1 + 1?", "2")
    row["messages"] = row.pop("prompt")
    path = write_parquet(str(tmp_path / "messages.parquet"), [row])
    with pytest.raises(ValueError, match="data.prompt_key"):
        PromptDataset([path], tokenizer, 64, "error", False)
    batch = PromptDataset([path], tokenizer, 64, "error", False, prompt_key="messages").rows([0])
    assert batch["raw_prompt"][0][0]["content"] == "What is 1 + 1?"


def _corrupt(tmp_path):
    path = tmp_path / "corrupt.parquet"
    path.write_bytes(b"this is not parquet at all")
    return str(path)


def _empty(tmp_path):
    rows = [make_row(0, "q", "1")]
    table = pa.Table.from_pylist(rows).slice(0, 0)
    path = str(tmp_path / "empty.parquet")
    pq.write_table(table, path)
    return path


def _no_reward_model(tmp_path):
    row = make_row(0, "q", "1")
    del row["reward_model"]
    return write_parquet(str(tmp_path / "no_reward.parquet"), [row])


@pytest.mark.parametrize("make_file, expected", [
    (lambda tmp: str(tmp / "missing.parquet"), "does not exist"),
    (_corrupt, "not a readable parquet file"),
    (_empty, "has no rows"),
    (_no_reward_model, "'reward_model'"),
    (lambda tmp: str(tmp), "is a directory"),
])
def test_bad_files_give_one_line_errors(tokenizer, tmp_path, make_file, expected):
    path = make_file(tmp_path)
    for build in (lambda: check_data_files([path], "prompt"),
                  lambda: PromptDataset([path], tokenizer, 64, "error", False)):
        with pytest.raises(ValueError) as caught:
            build()
        message = str(caught.value)
        assert expected in message and path in message and "\n" not in message


def test_out_of_range_index(tokenizer, data_file):
    with pytest.raises(IndexError):
        PromptDataset([data_file], tokenizer, 64, "error", False).rows([3])


def test_check_data_files_does_not_import_torch(data_file):
    code = ("import sys; from dagrl.data.dataset import check_data_files; "
            f"n = check_data_files([{data_file!r}], 'prompt'); assert n == 3, n; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert result.returncode == 0, result.stderr
