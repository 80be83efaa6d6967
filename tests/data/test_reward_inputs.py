"""Runs that would train nothing, found before the first step: rows no scorer takes, rows without a ground
truth, a reward function that cannot take the trainer's call (pre-flight), and a prompt too long for
data.truncation=error (the dataset's start-up length scan)."""

from __future__ import annotations

import numpy as np
import pytest

from dagrl.config.errors import ConfigError
from dagrl.data.checks import check_reward_inputs, data_sources, first_row_without_ground_truth
from dagrl.data.dataset import PromptDataset
from dagrl.reward.custom import check_reward_signature, load_custom_reward_fn
from dagrl.reward.scorers import SCORER_BY_DATA_SOURCE
from tests.data.test_dataset import RecordingTokenizer, template_ids
from tests.helpers import make_row, write_parquet

KNOWN = tuple(SCORER_BY_DATA_SOURCE)


def rows(count: int = 6) -> list[dict]:
    return [make_row(i, f"What is {i} + 1?", str(i + 1)) for i in range(count)]


def test_data_sources_gives_each_value_with_its_first_row(tmp_path):
    data = rows()
    data[2]["data_source"], data[4]["data_source"], data[5]["data_source"] = "mine", "mine", None
    path = write_parquet(str(tmp_path / "train.parquet"), data)
    assert data_sources(path) == {"dagrl/arithmetic": 0, "mine": 2, None: 5}


def test_a_data_source_without_scorer_names_the_file_the_value_and_the_fix(tmp_path):
    data = rows()
    data[3]["data_source"] = "openai/GSM8K"
    path = write_parquet(str(tmp_path / "train.parquet"), data)
    with pytest.raises(ValueError) as caught:
        check_reward_inputs([path], KNOWN)
    message = str(caught.value)
    for part in (path, "'openai/GSM8K'", "row 3", "custom_reward_function.path", "openai/gsm8k"):
        assert part in message
    assert "\n" not in message
    check_reward_inputs([path], None)  # a custom reward function decides what it scores


def test_rows_without_ground_truth(tmp_path):
    data = rows()
    data[4]["reward_model"]["ground_truth"] = None
    path = write_parquet(str(tmp_path / "train.parquet"), data)
    assert first_row_without_ground_truth(path) == 4
    with pytest.raises(ValueError, match="row 4"):
        check_reward_inputs(path, KNOWN)
    check_reward_inputs(path, None)  # a custom scorer may need none (an LLM judge): passed as None
    for row in data:
        row["reward_model"] = {"style": "rule", "answer": "1"}
    renamed = write_parquet(str(tmp_path / "renamed.parquet"), data)
    assert first_row_without_ground_truth(renamed) == -1
    for known in (KNOWN, None):  # the manager's reward_model["ground_truth"] would fail every row
        with pytest.raises(ValueError, match="no reward_model.ground_truth"):
            check_reward_inputs(renamed, known)
    assert first_row_without_ground_truth(write_parquet(str(tmp_path / "ok.parquet"), rows())) is None


def test_the_scan_reads_many_row_groups(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = rows(3) * 50000
    data[-1] = make_row(9, "q", "1", data_source="late/source")
    path = str(tmp_path / "big.parquet")
    pq.write_table(pa.Table.from_pylist(data), path, row_group_size=10000)
    assert data_sources(path) == {"dagrl/arithmetic": 0, "late/source": len(data) - 1}


@pytest.mark.parametrize(
    "source",
    [
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n",
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 0.0\n",
        "def compute_score(*args, **kwargs):\n    return 0.0\n",
        "def compute_score(data_source, solution_str, ground_truth, extra_info, scale=1.0):\n    return 0.0\n",
    ],
    ids=["verl", "kwargs", "varargs", "named_kwarg"],
)
def test_signatures_that_take_the_trainer_call(tmp_path, source):
    path = tmp_path / "reward.py"
    path.write_text(source)
    kwargs = {} if "kwargs" not in source and "scale" not in source else {"scale": 2.0}
    assert callable(load_custom_reward_fn(str(path), "compute_score", kwargs))


@pytest.mark.parametrize(
    "source, kwargs, expected",
    [
        ("def compute_score(solution_str, ground_truth):\n    return 0.0\n", {}, "too many positional arguments"),
        (
            "def compute_score(data_source, solution_str, ground_truth):\n    return 0.0\n",
            {},
            "too many positional arguments",
        ),
        (
            "def compute_score(data_source, solution_str, ground_truth, extra_info, tokenizer):\n    return 0.0\n",
            {},
            "'tokenizer'",
        ),
        (
            "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n",
            {"scale": 2},
            "'scale'",
        ),
    ],
    ids=["two_args", "no_extra_info", "extra_required", "unexpected_kwarg"],
)
def test_signatures_that_cannot_take_it_name_the_function_and_file(tmp_path, source, kwargs, expected):
    path = tmp_path / "reward.py"
    path.write_text(source)
    with pytest.raises(ValueError) as caught:
        load_custom_reward_fn(str(path), "compute_score", kwargs)
    message = str(caught.value)
    for part in (str(path), "compute_score(", "cannot take the trainer's call", expected):
        assert part in message
    assert "\n" not in message


def test_a_builtin_without_signature_is_left_to_its_calls():
    check_reward_signature(max, "x.py", "max")  # no error: inspect cannot read it


def long_rows(overlong: int, count: int = 8) -> list[dict]:
    data = [make_row(i, f"What is {i} + 1?", str(i + 1)) for i in range(count)]
    data[overlong] = make_row(overlong, "What is 1 + 1? Explain every step. " * 6, "2")
    return data


def test_truncation_error_scan_finds_the_overlong_row_at_start_up(tokenizer, tmp_path):
    path = write_parquet(str(tmp_path / "train.parquet"), long_rows(6))
    width = len(template_ids(tokenizer, "What is 7 + 1?")) + 2
    PromptDataset([path], tokenizer, width, "error", False)  # without check_overlong: found when drawn
    with pytest.raises(ConfigError) as caught:
        PromptDataset([path], tokenizer, width, "error", False, check_overlong=True)
    assert caught.value.key == "data.max_prompt_length"
    for part in (path, "row 6", "data.filter_overlong_prompts=True", "data.truncation=left|right|middle"):
        assert part in str(caught.value)
    assert len(PromptDataset([path], tokenizer, width, "error", True, check_overlong=True)) == 7  # filtered
    PromptDataset([path], tokenizer, width, "left", False, check_overlong=True)  # truncated: nothing to find


def test_the_scan_is_split_over_ranks_and_every_rank_names_the_same_row(tokenizer, tmp_path):
    path = write_parquet(str(tmp_path / "train.parquet"), long_rows(1))
    width = len(template_ids(tokenizer, "What is 7 + 1?")) + 2
    results = {}

    def gather_for(rank):
        def all_gather(local):
            results[rank] = local
            other = np.array([1, 99]) if rank == 1 else np.array([-1, 0])  # what the other rank found
            return [local, other] if rank == 0 else [other, local]

        return all_gather

    recorder = RecordingTokenizer(tokenizer)
    with pytest.raises(ConfigError, match="row 1 .* 99 tokens"):  # rank 1 scans rows 4..7: rank 0's find wins
        PromptDataset(
            [path], recorder, width, "error", False, rank=1, world_size=2, all_gather=gather_for(1), check_overlong=True
        )
    # row 0 (every rank's check of the chat template), then its own share only
    assert len(recorder.templated) == 5 and recorder.templated[0] == "What is 0 + 1?" and results[1][0] == -1
    with pytest.raises(ConfigError, match="row 1 "):
        PromptDataset(
            [path],
            tokenizer,
            width,
            "error",
            False,
            rank=0,
            world_size=2,
            all_gather=gather_for(0),
            check_overlong=True,
        )
    assert results[0][0] == 1
