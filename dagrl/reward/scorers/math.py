"""Math answers checked with `math-verify`: the response's final answer (boxed first) against the ground truth.

math-verify's own timeouts use `signal.alarm`, which would cancel the reward manager's per-sample timer (both use
the process's one real-time timer). So its timeouts are turned off here and the manager's timer bounds each call.
"""

from __future__ import annotations

import logging

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify


class _DropDisabledTimeoutNotice(logging.Filter):
    """math-verify warns once that its timeout is off; here that is intended (the manager times each sample)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropDisabledTimeoutNotice())

_PREDICTION_CONFIG = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
# A response can be long; its final answer is near the end, and parsing all of it costs time.
_TAIL_CHARS = 2000


def compute_score(solution_str: str, ground_truth: str, score: float = 1.0) -> float:
    """`score` when the response's answer is mathematically equal to `ground_truth`, else 0.0."""
    truth = str(ground_truth).strip()
    if not truth:
        raise ValueError("math ground_truth is empty; check the reward_model.ground_truth column of the data")
    # Ground truths are stored bare ("\\frac{1}{2}"); boxing them makes math-verify read them as LaTeX.
    gold = parse(truth if "\\boxed" in truth else "\\boxed{" + truth + "}", parsing_timeout=None)
    if not gold:
        raise ValueError(f"math-verify cannot parse the ground truth {truth!r}")
    prediction = parse(solution_str[-_TAIL_CHARS:], extraction_config=_PREDICTION_CONFIG, parsing_timeout=None)
    if not prediction:
        return 0.0
    return score if verify(gold, prediction, timeout_seconds=None) else 0.0
