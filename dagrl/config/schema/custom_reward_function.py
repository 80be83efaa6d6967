"""The custom_reward_function section: each key's type, default, range, choices and doc
(conf/custom_reward_function/default.yaml is written from it)."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.config.schema.spec import File, Section, key


@dataclass(frozen=True)
class CustomRewardFunction(Section):
    """Your own scorer instead of the built-in ones (chosen by data_source)."""

    path: File | None = key(None, "python file defining the function; null = built-in scorers")
    name: str = key(
        "compute_score", "function name: f(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)"
    )
    reward_kwargs: dict = key({}, "extra keyword arguments for it: +custom_reward_function.reward_kwargs.key=value")
