from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dagrl.reward.custom import load_custom_reward_fn


def write(tmp_path, text: str, name: str = "my_reward.py") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_loads_the_named_function(tmp_path):
    path = write(
        tmp_path,
        "def my_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return float(solution_str == ground_truth)\n",
    )
    function = load_custom_reward_fn(path, "my_score")
    assert function("x", "4", "4", None) == 1.0 and function("x", "5", "4", None) == 0.0


@pytest.mark.parametrize(
    "setup, name, expected",
    [
        (lambda tmp: str(tmp / "absent.py"), "compute_score", "does not exist"),
        (lambda tmp: write(tmp, "def other(): pass\n"), "compute_score", "has no function 'compute_score'"),
        (lambda tmp: write(tmp, "compute_score = 3\n"), "compute_score", "not a function"),
        (lambda tmp: write(tmp, "import no_such_module_anywhere\n"), "compute_score", "failed to import"),
        (lambda tmp: write(tmp, "x = 1\n", name="reward.txt"), "compute_score", "not a .py file"),
    ],
)
def test_errors_name_file_and_config_key(tmp_path, setup, name, expected):
    path = setup(tmp_path)
    with pytest.raises(ValueError) as caught:
        load_custom_reward_fn(path, name)
    message = str(caught.value)
    assert expected in message and path in message and "custom_reward_function." in message
    assert "\n" not in message


def test_missing_function_lists_what_the_file_defines(tmp_path):
    path = write(tmp_path, "def score_a(*a): return 1.0\n")
    with pytest.raises(ValueError, match=r"\['score_a'\]"):
        load_custom_reward_fn(path, "compute_score")


def test_loading_does_not_import_torch(tmp_path):
    path = write(tmp_path, "def compute_score(*a): return 1.0\n")
    code = (
        "import sys; from dagrl.reward.custom import load_custom_reward_fn; "
        f"assert load_custom_reward_fn({path!r}, 'compute_score')() == 1.0; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert result.returncode == 0, result.stderr
