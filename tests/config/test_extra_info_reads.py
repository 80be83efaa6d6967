"""A custom reward function's extra_info["key"] reads are found in its source and compared with the data files'
extra_info fields before any model is built; the function is never called there."""

import pytest

from dagrl.config.errors import ConfigError
from dagrl.config.load import compose
from dagrl.config.preflight.reward import check_extra_info_reads, extra_info_reads
from dagrl.config.tree import Cfg
from dagrl.reward.custom import load_custom_reward_fn
from tests.conftest import cpu_run_overrides

SCORER = """CALLS = []


def compute_score(data_source, solution_str, ground_truth, info=None):
    CALLS.append(1)
    if data_source == "other":
        return float(info[{key!r}] == solution_str)
    return float(info.get("target") == solution_str or info["answer"] == solution_str)
"""


def check(tmp_path, tiny_model, tiny_data, key: str, **extra):
    path = tmp_path / f"scorer_{key}.py"
    path.write_text(SCORER.format(key=key))
    overrides = {"custom_reward_function.path": str(path), **extra}
    cfg = Cfg(compose(cpu_run_overrides(tiny_model, tiny_data, tmp_path / "ckpt", **overrides)))
    function = load_custom_reward_fn(str(path))
    try:
        check_extra_info_reads(cfg, function, [tiny_data["train"], tiny_data["test"]])
    finally:
        assert function.__globals__["CALLS"] == []  # read, never called


def test_the_reads_are_the_subscripts_of_the_fourth_parameter(tmp_path):
    path = tmp_path / "scorer.py"
    path.write_text(SCORER.format(key="target"))
    assert extra_info_reads(load_custom_reward_fn(str(path))) == [("target", 7), ("answer", 8)]


def test_a_key_no_data_file_has_is_refused_naming_it_and_the_keys_there(tmp_path, tiny_model, tiny_data):
    with pytest.raises(ConfigError) as caught:
        check(tmp_path, tiny_model, tiny_data, "target")
    message = str(caught.value)
    assert "reads extra_info['target'] (line 7)" in message and "'answer', 'index', 'question', 'split'" in message
    assert caught.value.key == "custom_reward_function.path"


def test_keys_the_data_has_and_get_reads_pass(tmp_path, tiny_model, tiny_data):
    check(tmp_path, tiny_model, tiny_data, "question")  # .get("target") tolerates the missing key


def test_multi_turn_runs_are_not_checked(tmp_path, tiny_model, tiny_data):
    # the agent loop adds its own keys (messages, num_turns, ...) to each row's extra_info
    check(tmp_path, tiny_model, tiny_data, "num_turns", **{"actor_rollout_ref.rollout.multi_turn.enable": True})
