"""The synthetic addition task (examples/data_preprocess/arithmetic.py): the last integer in the response."""

from __future__ import annotations

import re

_INTEGER = re.compile(r"-?\d+")


def compute_score(solution_str: str, ground_truth: str | int) -> float:
    """1.0 when the last integer in the response equals the ground truth, else 0.0."""
    numbers = _INTEGER.findall(solution_str)
    if not numbers:
        return 0.0
    return 1.0 if int(numbers[-1]) == int(str(ground_truth).strip()) else 0.0
