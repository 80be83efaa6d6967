"""MoE routing replay (verl's names): the experts the rollout (R3) or the old-log-prob pass (R2) chose for each token
are forced in the trainer's later forwards, so near-tied tokens are not routed to other experts there (the MoE
rollout/train log-prob gap, arXiv 2510.23027)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dagrl.config.schema.spec import Section, key

MODES = ("disabled", "R2", "R3")


@dataclass(frozen=True)
class RouterReplay(Section):
    """MoE routing replay in the actor's old-log-prob and update passes"""

    mode: str = key(
        "disabled",
        "disabled | R2 (the old-log-prob pass's routes replayed in the update) | R3 (the rollout's routes "
        "replayed in the old-log-prob pass and the update; needs rollout.enable_rollout_routing_replay)",
        choices=MODES,
    )


def rollout_routing_replay_key() -> Any:
    """The rollout's `enable_rollout_routing_replay` key."""
    return key(
        False,
        "the rollout records each token's top-k experts per MoE layer (routed_experts) for "
        "actor.router_replay.mode=R3 and the actor/routing_agreement metric (hf and vllm rollouts)",
    )
