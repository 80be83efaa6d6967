"""Rule scorers, chosen by a row's `data_source`.

`default_compute_score` is the `compute_score` the reward manager uses when no
`custom_reward_function.path` is set. Scorer modules are imported on first use, so a run that never sees a
math row never imports math-verify (and sympy).
"""

from __future__ import annotations

import importlib
from typing import Any

# data_source -> (module under dagrl.reward.scorers, fixed keyword arguments).
# GSM8K uses the strict "#### <answer>" format, as verl does: the prompt asks for it.
SCORER_BY_DATA_SOURCE: dict[str, tuple[str, dict[str, Any]]] = {
    "openai/gsm8k": ("gsm8k", {"method": "strict"}),
    "gsm8k": ("gsm8k", {"method": "strict"}),
    "lighteval/MATH": ("math", {}),
    "DigitalLearningGmbH/MATH-lighteval": ("math", {}),
    "HuggingFaceH4/MATH-500": ("math", {}),
    "agentica-org/DeepScaleR-Preview-Dataset": ("math", {}),
    "math": ("math", {}),
    "dagrl/arithmetic": ("arithmetic", {}),
    "dagrl/addition_retry": ("arithmetic", {}),
    # 5-7 digit answers, often written with thousands separators.
    "dagrl/products": ("last_number", {}),
    "dagrl/marbles": ("last_number", {}),
}


def default_compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, **kwargs: Any
) -> float:
    """The rule score of one response; `kwargs` (custom_reward_function.reward_kwargs) go to the scorer."""
    if data_source not in SCORER_BY_DATA_SOURCE:
        raise ValueError(
            f"no built-in reward scorer for data_source {data_source!r} (built-in: "
            f"{sorted(SCORER_BY_DATA_SOURCE)}); set custom_reward_function.path (and .name) to a "
            f"file defining compute_score(data_source, solution_str, ground_truth, extra_info)"
        )
    module_name, fixed_kwargs = SCORER_BY_DATA_SOURCE[data_source]
    module = importlib.import_module(f"{__name__}.{module_name}")
    return module.compute_score(solution_str, ground_truth, **{**fixed_kwargs, **kwargs})
