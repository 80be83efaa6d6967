"""Critic nodes of PPO: the values of the rollout (before the advantage) and the critic update (beside the actor's).

The value loss is verl's clipped one: new values may move at most critic.cliprange_value away from the rollout-time
values before the clipped error takes over; 0.5 x max(unclipped, clipped) squared error, aggregated like the
actor's loss (critic.loss_agg_mode, per-token weights over the whole mini-batch and every DP rank).
"""

from __future__ import annotations

import functools

import torch

from dagrl.data.batch import Batch
from dagrl.nodes.common import mean_over_mini_batches, token_budget, weighted_mini_batches
from dagrl.nodes.context import StepContext


def value_loss(
    micro_batch: Batch, values: torch.Tensor, entropy: torch.Tensor | None, cliprange_value: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The critic engine's loss_fn: weighted per-token clipped value loss of one micro-batch (additive)."""
    old_values, returns = micro_batch["values"], micro_batch["returns"]
    # verl's form: a value within the range is kept bit for bit (old + clamp(v - old) rounds it in bf16, and the
    # rounded copy would count as clipped in critic/vf_clipfrac)
    clipped = torch.clamp(values, old_values - cliprange_value, old_values + cliprange_value)
    unclipped_error = (values - returns) ** 2
    clipped_error = (clipped - returns) ** 2
    loss = (0.5 * torch.maximum(unclipped_error, clipped_error) * micro_batch["token_weights"]).sum()
    mean_weights = micro_batch["token_mean_weights"]
    return loss, {
        "critic/vf_loss": loss.detach(),
        "critic/vf_clipfrac": ((clipped_error > unclipped_error).float() * mean_weights).sum(),
        "critic/vpred_mean": (values.detach() * mean_weights).sum(),
    }


def compute_values(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    """`values` [B, R]: the critic's value of the state before each response token (0 off the response)."""
    critic_cfg = ctx.cfg.critic
    batch["values"] = ctx.critic.compute_values(
        batch,
        micro_batch_size=ctx.schedule.critic.forward_micro_batch,
        max_token_len=token_budget(critic_cfg, "use_dynamic_bsz", "forward_max_token_len_per_gpu"),
    )
    return batch, {}


def update_critic(ctx: StepContext, batch: Batch) -> tuple[Batch, dict[str, float]]:
    """critic.ppo_epochs passes of critic mini-batches towards the advantage node's `returns`."""
    critic_cfg = ctx.cfg.critic
    loss_fn = functools.partial(value_loss, cliprange_value=critic_cfg.cliprange_value)
    cut = ctx.schedule.critic
    mini_batches = weighted_mini_batches(
        ctx, batch, cut, critic_cfg.shuffle, critic_cfg.loss_agg_mode, ctx.shape.response_length
    )
    budget = token_budget(critic_cfg, "use_dynamic_bsz", "ppo_max_token_len_per_gpu")
    steps = [
        ctx.critic.train_step(mini_batch, loss_fn, micro_batch_size=cut.micro_batch, max_token_len=budget)
        for mini_batch in mini_batches
    ]
    return batch, mean_over_mini_batches(steps)
