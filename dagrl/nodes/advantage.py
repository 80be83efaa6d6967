"""Advantage node: algorithm.adv_estimator (dagrl/algo/catalog.py) over token-level rewards, and the critic's
`values` for an estimator that needs them.

Sequence masking (actor.mis_ratio_low/high, dagrl/algo/off_policy.py) is applied here, before the advantage, as
verl's trainer applies its rejection to response_mask before compute_advantage: the dropped sequences get a
`loss_mask` of 0, which the estimators (their whitening statistics included), the critic update and the actor
update all read in place of response_mask. response_mask itself stays: the engines lay rows out by it.
"""

from __future__ import annotations


import torch

from dagrl.algo.advantage import AdvantageInputs, ReduceSum
from dagrl.algo.catalog import ADV_ESTIMATORS
from dagrl.data.batch import Batch
from dagrl.nodes.common import masked_stats, reject_sequences
from dagrl.nodes.context import StepContext


def compute_advantage(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    algorithm = ctx.cfg.algorithm
    name = algorithm.adv_estimator
    batch = reject_sequences(ctx.cfg, batch)
    rewards, mask = batch["token_level_rewards"], batch.get("loss_mask", batch["response_mask"])
    # statistics over the global batch: every model-parallel rank of a DP shard holds the same rows
    reduce_sum = ctx.dp_sums
    estimator = ADV_ESTIMATORS[name]  # pre-flight rejects unknown names; this guards graphs that bypass it
    critic = "values" in estimator.needs
    baselines = batch["reward_baselines"] if "reward_baselines" in estimator.needs else None
    inputs = AdvantageInputs(rewards, mask, batch["uid"], batch["values"] if critic else None, reduce_sum, baselines)
    advantages, returns = estimator(inputs, algorithm)
    batch["advantages"], batch["returns"] = advantages, returns
    metrics = {
        **masked_stats("critic/advantages", advantages, mask, reduce_sum),
        **masked_stats("critic/returns", returns, mask, reduce_sum),
    }
    if critic:
        metrics.update(masked_stats("critic/values", batch["values"], mask, reduce_sum))
        metrics["critic/vf_explained_var"] = explained_variance(returns, batch["values"], mask, reduce_sum)
    return batch, metrics


def explained_variance(returns: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, reduce_sum: ReduceSum) -> float:
    """1 - Var(returns - values) / Var(returns) over the response tokens of the global batch (verl's metric)."""
    mask = mask.double()
    residual = (returns - values).double()
    count, s_ret, s_ret2, s_res, s_res2 = reduce_sum(
        torch.stack(
            [
                mask.sum(),
                (returns.double() * mask).sum(),
                (returns.double() ** 2 * mask).sum(),
                (residual * mask).sum(),
                (residual**2 * mask).sum(),
            ]
        )
    ).tolist()
    if count == 0:
        return 0.0
    var_returns = s_ret2 / count - (s_ret / count) ** 2
    var_residual = s_res2 / count - (s_res / count) ** 2
    return 1.0 - var_residual / (var_returns + 1e-8)
