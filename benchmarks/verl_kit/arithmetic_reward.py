"""verl's custom reward for dagrl's arithmetic task: verl calls `compute_score(data_source, solution_str, ground_truth,
extra_info)`; the score is dagrl's own scorer, so both trainers are graded by the same rule."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: verl loads this file by path
from dagrl.reward.scorers.arithmetic import compute_score as _arithmetic


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **_):
    return _arithmetic(solution_str, ground_truth)
