"""Fixtures shared by the trainer's test modules (tests/conftest.py has the session-wide ones)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import cpu_run_overrides

PARITY_REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, mode="parity"):
    """parity: prompts with an even answer score 1 for every response (a uniform group); the others score by the
    parity of the response length, which varies between samples. constant: every response scores 1."""
    if mode == "constant" or int(ground_truth) % 2 == 0:
        return {"score": 1.0, "acc": 1.0}
    return {"score": float(len(solution_str) % 2), "acc": float(len(solution_str) % 2)}
'''


@pytest.fixture(scope="module")
def dapo_args(tiny_model, tiny_data, tmp_path_factory):
    """`make(out, mode="parity", **extra)`: the overrides of a dag=dapo CPU run on the tiny model whose reward makes
    some groups uniform (tests/trainer/test_dapo.py and test_prompt_ledger.py)."""
    reward = tmp_path_factory.mktemp("reward") / "parity_reward.py"
    reward.write_text(PARITY_REWARD)

    def make(out: Path, mode: str = "parity", **extra) -> list[str]:
        return [
            "dag=dapo",
            *cpu_run_overrides(
                tiny_model,
                tiny_data,
                out,
                **{
                    "custom_reward_function.path": str(reward),
                    "+custom_reward_function.reward_kwargs.mode": mode,
                    "actor_rollout_ref.rollout.n": 4,
                    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
                    "trainer.val_before_train": False,
                    "reward_model.overlong_buffer.enable": True,
                    "reward_model.overlong_buffer.len": 2,
                    **extra,
                },
            ),
        ]

    return make
