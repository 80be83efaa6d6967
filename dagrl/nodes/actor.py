"""Actor update node: PPO epochs over mini-batches, one optimizer step per mini-batch."""
from __future__ import annotations

import functools
from collections import defaultdict

import numpy as np

from dagrl.algo.policy_loss import PolicyLossSpec, actor_loss, token_weights
from dagrl.data.batch import Batch
from dagrl.nodes.context import StepContext
from dagrl.utils.dist import data_parallel_sum
from dagrl.utils.faults import nan_injected


def policy_loss_spec(ctx: StepContext) -> PolicyLossSpec:
    actor = ctx.cfg.actor_rollout_ref.actor
    clip = actor.clip_ratio
    return PolicyLossSpec(
        clip_ratio_low=clip if actor.clip_ratio_low is None else actor.clip_ratio_low,
        clip_ratio_high=clip if actor.clip_ratio_high is None else actor.clip_ratio_high,
        clip_ratio_c=actor.clip_ratio_c, entropy_coeff=actor.entropy_coeff,
        use_kl_loss=actor.use_kl_loss, kl_loss_coef=actor.kl_loss_coef, kl_loss_type=actor.kl_loss_type,
        loss_agg_mode=actor.loss_agg_mode)


def update_actor(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    actor_cfg = ctx.cfg.actor_rollout_ref.actor
    n = ctx.cfg.actor_rollout_ref.rollout.n
    rows_per_mini_batch = actor_cfg.ppo_mini_batch_size * n // ctx.shape.actor_dp
    spec = policy_loss_spec(ctx)
    loss_fn = functools.partial(actor_loss, spec=spec)
    model_parallel = ctx.shape.world_size // ctx.shape.actor_dp
    per_mini_batch: dict[str, list[float]] = defaultdict(list)
    for epoch in range(actor_cfg.ppo_epochs):
        order = np.arange(len(batch))
        if actor_cfg.shuffle:
            order = np.random.default_rng([ctx.cfg.data.seed, ctx.step, epoch]).permutation(len(batch))
        for mini_batch in batch.select(order).split(rows_per_mini_batch):
            global_tokens = data_parallel_sum(float(mini_batch["response_mask"].sum()), model_parallel)
            weights = token_weights(mini_batch["response_mask"], spec.loss_agg_mode, global_tokens)
            mini_batch["token_weights"] = weights * float("nan") if nan_injected(ctx.step) else weights
            step_metrics = ctx.actor.train_step(mini_batch, loss_fn,
                                                micro_batch_size=actor_cfg.ppo_micro_batch_size_per_gpu,
                                                temperature=ctx.cfg.actor_rollout_ref.rollout.temperature)
            for key, value in step_metrics.items():
                per_mini_batch[key].append(value)
    ctx.versions.actor += 1
    return batch, {key: float(np.mean(values)) for key, values in per_mini_batch.items()}
