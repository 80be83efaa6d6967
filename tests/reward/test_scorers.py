from __future__ import annotations

import pytest

from dagrl.reward.scorers import default_compute_score
from dagrl.reward.scorers import arithmetic, gsm8k
from dagrl.reward.scorers import math as math_scorer


@pytest.mark.parametrize(
    "text, truth, strict, flexible",
    [
        ("She has 3 + 4 = 7 apples.\n#### 7", "7", 1.0, 1.0),
        ("#### 1,000", "1000", 1.0, 1.0),
        ("The total is $1,234.", "1234", 0.0, 1.0),  # no "####": strict finds no answer
        ("#### 5 and later 9", "5", 1.0, 0.0),  # flexible reads the last number
        ("#### 72.00", "72", 1.0, 1.0),
        ("#### -3", "-3", 1.0, 1.0),
        ("no number here", "3", 0.0, 0.0),
        ("#### 8\n#### 9", "9", 1.0, 1.0),  # the last "####" counts
    ],
)
def test_gsm8k_strict_and_flexible(text, truth, strict, flexible):
    assert gsm8k.compute_score(text, truth, method="strict") == strict
    assert gsm8k.compute_score(text, truth, method="flexible") == flexible


def test_gsm8k_format_score_for_wrong_answer_in_format():
    assert gsm8k.compute_score("#### 6", "7", format_score=0.1) == 0.1
    assert gsm8k.compute_score("six", "7", format_score=0.1) == 0.0
    with pytest.raises(ValueError, match="strict"):
        gsm8k.compute_score("#### 6", "6", method="loose")


@pytest.mark.parametrize(
    "text, truth, expected",
    [
        ("So the answer is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}", 1.0),
        ("So the answer is \\boxed{0.5}.", "\\frac{1}{2}", 1.0),
        ("\\boxed{3\\sqrt2}", "3\\sqrt{2}", 1.0),
        ("\\boxed{1+x^2}", "x^2+1", 1.0),
        ("\\boxed{71}", "72", 0.0),
        ("I do not know.", "72", 0.0),
        ("We have 3 apples and 2 more, 3 + 2 = 5, so \\boxed{5}", "5", 1.0),
    ],
)
def test_math_with_math_verify(text, truth, expected):
    assert math_scorer.compute_score(text, truth) == expected


def test_math_empty_ground_truth_is_an_error():
    with pytest.raises(ValueError, match="ground_truth"):
        math_scorer.compute_score("\\boxed{1}", "  ")


@pytest.mark.parametrize(
    "text, truth, expected",
    [
        ("19", "19", 1.0),
        ("The answer is 19.", 19, 1.0),
        ("7 + 12 = 19", "19", 1.0),
        ("7 + 12 = 18", "19", 0.0),
        ("19 or maybe 20", "19", 0.0),
        ("", "19", 0.0),
        ("-4", "-4", 1.0),
    ],
)
def test_arithmetic_last_integer(text, truth, expected):
    assert arithmetic.compute_score(text, truth) == expected


def test_default_dispatch_by_data_source():
    assert default_compute_score("openai/gsm8k", "#### 4", "4") == 1.0
    assert default_compute_score("openai/gsm8k", "it is 4", "4") == 0.0  # gsm8k is strict by default
    assert default_compute_score("openai/gsm8k", "it is 4", "4", None, method="flexible") == 1.0
    assert default_compute_score("DigitalLearningGmbH/MATH-lighteval", "\\boxed{4}", "4") == 1.0
    assert default_compute_score("agentica-org/DeepScaleR-Preview-Dataset", "\\boxed{2/4}", "\\frac12") == 1.0
    assert default_compute_score("lighteval/MATH", "\\boxed{5}", "4") == 0.0
    assert default_compute_score("dagrl/arithmetic", "4", "4", {"split": "test"}) == 1.0


def test_unknown_data_source_names_the_fix():
    with pytest.raises(ValueError) as caught:
        default_compute_score("my/secret_task", "4", "4")
    assert "custom_reward_function.path" in str(caught.value) and "my/secret_task" in str(caught.value)
