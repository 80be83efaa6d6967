"""Advantage node: algorithm.adv_estimator over token-level rewards."""
from __future__ import annotations

from dagrl.algo.advantage import ESTIMATORS
from dagrl.data.batch import Batch
from dagrl.nodes.context import StepContext


def compute_advantage(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    algorithm = ctx.cfg.algorithm
    estimator = ESTIMATORS[algorithm.adv_estimator]
    advantages, returns = estimator(batch["token_level_rewards"], batch["response_mask"], batch["uid"],
                                    norm_by_std=algorithm.norm_adv_by_std_in_grpo)
    batch["advantages"], batch["returns"] = advantages, returns
    valid = advantages[batch["response_mask"].bool()]
    return batch, {
        "critic/advantages/mean": valid.mean().item() if valid.numel() else 0.0,
        "critic/advantages/max": valid.max().item() if valid.numel() else 0.0,
        "critic/advantages/min": valid.min().item() if valid.numel() else 0.0,
    }
