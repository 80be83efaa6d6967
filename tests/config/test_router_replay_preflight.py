"""Pre-flight of MoE routing replay (dagrl/config/preflight/rollout.py): what R3 needs (the rollout's routes, the
single-turn colocated generate, an MoE model) and the layouts replay does not cover."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "overrides, model_type, refused",
    [
        (("actor_rollout_ref.actor.router_replay.mode=R3",), "qwen3_moe", "enable_rollout_routing_replay=true: set"),
        (
            (
                "actor_rollout_ref.rollout.enable_rollout_routing_replay=true",
                "actor_rollout_ref.rollout.name=sglang",
            ),
            "qwen3_moe",
            "the sglang rollout does not record routes",
        ),
        (
            ("actor_rollout_ref.rollout.enable_rollout_routing_replay=true", "actor_rollout_ref.hybrid_engine=false"),
            "qwen3_moe",
            "not multi-turn or asynchronous",
        ),
        (("actor_rollout_ref.actor.router_replay.mode=R2",), "qwen3", "needs an MoE model"),
        (
            ("actor_rollout_ref.rollout.enable_rollout_routing_replay=true",),
            "llama",
            "enable_rollout_routing_replay=false",
        ),
        (("actor_rollout_ref.actor.router_replay.mode=R2",), "qwen3_moe", None),
        (("actor_rollout_ref.rollout.enable_rollout_routing_replay=true",), "qwen3_moe", None),
        (
            ("actor_rollout_ref.rollout.enable_rollout_routing_replay=true", "actor_rollout_ref.rollout.name=vllm"),
            "qwen3_moe",
            None,
        ),
    ],
)
def test_pre_flight_of_routing_replay(overrides, model_type, refused):
    from dagrl.config.errors import ConfigError

    if refused is None:
        pre_flight(overrides, model_type)
        return
    with pytest.raises(ConfigError, match=refused):
        pre_flight(overrides, model_type)


def pre_flight(overrides: tuple[str, ...], model_type: str) -> None:
    """The routing-replay rule on the default config with `overrides`, for a model of `model_type`."""
    from dagrl.config.load import compose
    from dagrl.config.preflight.rollout import check_router_replay
    from dagrl.config.tree import Cfg

    check_router_replay(Cfg(compose(list(overrides))), {"model_type": model_type})


@pytest.mark.parametrize(
    "overrides, refused",
    [
        (("actor_rollout_ref.actor.megatron.context_parallel_size=2",), "context_parallel_size=1"),
        (
            (
                "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2",
                "actor_rollout_ref.model.enable_gradient_checkpointing=true",
            ),
            "enable_gradient_checkpointing=false",
        ),
    ],
)
def test_pre_flight_refuses_layouts_replay_does_not_cover(overrides, refused):
    from dagrl.config.errors import ConfigError

    with pytest.raises(ConfigError, match=refused):
        pre_flight(("actor_rollout_ref.actor.router_replay.mode=R2", *overrides), "qwen3_moe")
