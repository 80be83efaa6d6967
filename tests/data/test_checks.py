"""Pre-flight's data-file checks (dagrl/data/checks.py): a non-regular file refused from its stat, and the first
rows' prompts checked for the chat shape."""

from __future__ import annotations

import os
import threading

import pytest

from dagrl.data.checks import check_data_files, prompt_shape_problem
from tests.helpers import make_row, write_parquet


def test_a_fifo_is_refused_without_being_opened(tmp_path):
    path = str(tmp_path / "train.parquet")
    os.mkfifo(path)
    result: list[BaseException] = []

    def check() -> None:
        try:
            check_data_files([path])
        except ValueError as error:
            result.append(error)

    worker = threading.Thread(target=check, daemon=True)  # opening the FIFO would block this thread forever
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "check_data_files opened the FIFO"
    assert result and "FIFO" in str(result[0]) and path in str(result[0]) and "\n" not in str(result[0])


@pytest.mark.parametrize(
    "prompt, expected",
    [
        ("What is 1 + 1?", "plain string"),
        ([{"from": "human", "value": "What is 1 + 1?"}], "ShareGPT"),
        ([], "empty list"),
        (None, "is null"),
        ([{"content": "no role"}], "without role and content"),
    ],
)
def test_prompt_shapes_refused(prompt, expected):
    assert expected in prompt_shape_problem(prompt)


def test_a_chat_list_passes():
    assert (
        prompt_shape_problem([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}]) is None
    )


def test_only_the_first_rows_are_checked(tmp_path):
    rows = [make_row(i, f"What is {i} + 1?", str(i + 1)) for i in range(40)]
    rows[3]["prompt"] = []
    path = write_parquet(str(tmp_path / "early.parquet"), rows)
    with pytest.raises(ValueError, match=r"row 3: column 'prompt' is an empty list"):
        check_data_files([path])
    rows[3] = make_row(3, "What is 3 + 1?", "4")
    rows[39]["prompt"] = []  # beyond the rows pre-flight reads: found when drawn (dataset._chat)
    assert check_data_files([write_parquet(str(tmp_path / "late.parquet"), rows)]) == 40
