"""Exact match of the last integer in the response, thousands separators allowed ("281,764" is one number).

The products and marbles tasks (examples/data_preprocess/{products,marbles}.py) have 5-7 digit answers, which
models often write with commas; dagrl.reward.scorers.arithmetic would read "281,764" as 764.
"""

from __future__ import annotations

import re

# A comma-grouped number first ("1,234,567"), then a plain one; "3,4567" is two numbers, as written.
_INTEGER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?!\d)|-?\d+")


def last_integer(text: str) -> int | None:
    """The last integer in `text` (commas between digit groups dropped); None when there is none."""
    numbers = _INTEGER.findall(text)
    return int(numbers[-1].replace(",", "")) if numbers else None


def compute_score(solution_str: str, ground_truth: str | int) -> float:
    """1.0 when the last integer in the response equals the ground truth, else 0.0."""
    answer = last_integer(solution_str)
    return 1.0 if answer is not None and answer == int(str(ground_truth).replace(",", "").strip()) else 0.0
