"""The reward_model section: each key's type, default, range, choices and doc (conf/reward_model/default.yaml is
written from it)."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.config.schema.spec import NON_NEGATIVE, NON_NEGATIVE_INT, POSITIVE, Section, key, section


@dataclass(frozen=True)
class OverlongBuffer(Section):
    """dapo: linear penalty for responses within `len` tokens of max_response_length"""

    enable: bool = key(False, "turn the overlong penalty on")
    len: int = key(0, "buffer length in tokens", NON_NEGATIVE_INT)
    penalty_factor: float = key(1.0, "penalty at the very end of the buffer", NON_NEGATIVE)


@dataclass(frozen=True)
class RewardModel(Section):
    """Rule-based rewards (model-based reward models are not supported yet)."""

    reward_manager: str = key(
        "naive", "naive: one score per response | dapo: adds overlong_buffer shaping", choices=("naive", "dapo")
    )
    timeout_s: float = key(10.0, "per-response scorer time limit; a hang counts in reward/errors", POSITIVE)
    launch_reward_fn_async: bool = key(
        False, "score in a thread beside the log-prob passes (behind the reshard node; not with DAPO)"
    )
    on_error: str = key(
        "zero",
        "a scorer that raises or times out: zero (score 0, counted) | raise (stop the run)",
        choices=("zero", "raise"),
    )
    overlong_buffer: OverlongBuffer = section(
        OverlongBuffer, "dapo: linear penalty for responses within `len` tokens of max_response_length"
    )
