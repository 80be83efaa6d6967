"""GSM8K answers: `strict` reads the number after the last "####", `flexible` the last number in the text."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# A number as models write it: optional sign and "$", digits with thousands commas, optional decimals.
_NUMBER = r"-?\$?\s?[0-9][0-9,]*(?:\.[0-9]+)?"
_STRICT_ANSWER = re.compile(r"####\s*(" + _NUMBER + ")")
_ANY_NUMBER = re.compile(_NUMBER)
# Only the tail of a long response can hold the final answer; bounds regex time on runaway generations.
_TAIL_CHARS = 600


def _normalize(number: str) -> str:
    return number.replace(",", "").replace("$", "").replace(" ", "").strip().rstrip(".")


def _same_number(answer: str, ground_truth: str) -> bool:
    """Numeric equality when both parse ("72.00" == "72"), else exact text equality."""
    answer, truth = _normalize(answer), _normalize(ground_truth)
    try:
        return Decimal(answer) == Decimal(truth)
    except InvalidOperation:
        return answer == truth


def extract_answer(solution_str: str, method: str = "strict") -> str | None:
    """The final answer of a GSM8K-style response, or None when there is none in the required format."""
    tail = solution_str[-_TAIL_CHARS:]
    if method == "strict":
        matches = _STRICT_ANSWER.findall(tail)
    elif method == "flexible":
        matches = _ANY_NUMBER.findall(tail)
    else:
        raise ValueError(f"gsm8k scoring method must be 'strict' or 'flexible', got {method!r}")
    return _normalize(matches[-1]) if matches else None


def compute_score(
    solution_str: str, ground_truth: str, method: str = "strict", format_score: float = 0.0, score: float = 1.0
) -> float:
    """`score` for the right answer, `format_score` for a wrong answer in the right format, 0 for no answer."""
    answer = extract_answer(solution_str, method)
    if answer is None:
        return 0.0
    return score if _same_number(answer, str(ground_truth)) else format_score
