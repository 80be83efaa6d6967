"""The GRPO graph plus one node that makes advantages +inf at the steps in $DAGRL_TEST_INF_STEPS, for the
numerical-fault test: `dag.custom_pipeline_fn=tests.reliability.inf_pipeline:pipeline`."""

from __future__ import annotations

import os

from dagrl.config.conf_dir import CONF_DIR


def pipeline() -> dict:
    from omegaconf import OmegaConf

    nodes = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "dag" / "grpo.yaml"))["nodes"]  # a map: id -> node
    nodes["actor_update"]["deps"] = ["inject_inf"]
    nodes["inject_inf"] = {"role": "custom", "fn": "tests.reliability.inf_pipeline:inject_inf", "deps": ["advantage"]}
    return nodes


def inject_inf(ctx, batch):
    """+inf advantage on every response token, so every mini-batch's loss and gradients overflow."""
    steps = {int(s) for s in os.environ.get("DAGRL_TEST_INF_STEPS", "").split(",") if s}
    if ctx.step in steps:
        advantages = batch["advantages"].clone()
        advantages[batch["response_mask"].bool()] = float("inf")
        batch["advantages"] = advantages
    return batch, {}
