"""Advantage estimators. Each maps token-level rewards [B, R] to per-token (advantages, returns), both [B, R].

Group statistics (GRPO, RLOO, REINFORCE++-baseline) stay on one rank: a prompt's responses are never split over
data-parallel ranks before advantages are computed. Whitening statistics are batch-wide, so they are taken over
the whole global batch through `reduce_sum`, which sums a small float64 tensor of partial sums over the
data-parallel ranks (identity in a single process): the result does not depend on how the batch is sharded.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

import torch

ReduceSum = Callable[[torch.Tensor], torch.Tensor]
ESTIMATOR_NAMES = ("grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gae")


def _local(values: torch.Tensor) -> torch.Tensor:
    return values


def _groups(group_ids: Sequence) -> list[list[int]]:
    members: dict[object, list[int]] = defaultdict(list)
    for row, group in enumerate(group_ids):
        members[group].append(row)
    return list(members.values())


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, reduce_sum: ReduceSum = _local,
                  epsilon: float = 1e-8) -> torch.Tensor:
    """(values - mean) / sqrt(var + epsilon) with the mean and the unbiased variance over masked entries of the
    global batch (verl's masked_whiten, made global). Two reductions: the mean first, then squared deviations
    around it, which is exact where sum-of-squares minus squared-sum would cancel."""
    exact, mask = values.double(), mask.double()  # float64 partial sums: sharding barely changes the rounding
    count, total = reduce_sum(torch.stack([mask.sum(), (exact * mask).sum()])).tolist()
    mean = total / max(count, 1.0)
    squares = reduce_sum((((exact - mean) ** 2) * mask).sum().reshape(1)).item()
    variance = squares / (count - 1) if count > 1 else 0.0  # one token: it is the mean, whitened to 0
    return ((exact - mean) / (variance + epsilon) ** 0.5).to(values.dtype)


def grpo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, group_ids: Sequence,
                   norm_by_std: bool = True, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: each response's total reward minus its group's mean, divided by the group's unbiased std + epsilon
    when asked. A group with equal rewards gets advantage 0.

    A group of one has no baseline: as in verl, its mean counts as 0 and its std as 1, so the response's advantage
    is its raw score / (1 + epsilon) (its raw score without norm_by_std), REINFORCE without a baseline.
    Returns (advantages, returns), both [B, R], masked.
    """
    scores = token_level_rewards.sum(dim=-1)
    mean = torch.zeros_like(scores)
    std = torch.ones_like(scores)
    for rows in _groups(group_ids):
        if len(rows) > 1:
            mean[rows] = scores[rows].mean()
            std[rows] = scores[rows].std()
    advantage = scores - mean
    if norm_by_std:
        # a group with equal rewards has advantage 0 exactly (no 0/0 when epsilon is 0)
        advantage = torch.where(std > 0, advantage / (std + epsilon), torch.zeros_like(advantage))
    advantages = advantage.unsqueeze(-1) * response_mask
    return advantages, advantages


def rloo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                   group_ids: Sequence) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: each response's total reward minus the mean reward of the other responses of its prompt,
    r_i - (sum_j r_j - r_i) / (n - 1). A response alone in its group keeps its raw reward (baseline 0), as in
    verl. Broadcast to every response token."""
    scores = token_level_rewards.sum(dim=-1)
    baseline = torch.zeros_like(scores)
    for rows in _groups(group_ids):
        if len(rows) > 1:
            baseline[rows] = (scores[rows].sum() - scores[rows]) / (len(rows) - 1)
    advantages = (scores - baseline).unsqueeze(-1) * response_mask
    return advantages, advantages


def discounted_returns(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                       gamma: float) -> torch.Tensor:
    """G_t = r_t + gamma * G_{t+1} over the response tokens, as verl 0.9's REINFORCE++: a token outside the mask
    (a tool observation inside a multi-turn response, or padding) gets return 0 and passes the later return
    through unchanged, neither adding its reward nor discounting, so every assistant turn sees the final score.
    Nothing flows back from the padding after the response end: the scan starts at 0 there."""
    mask = response_mask.to(token_level_rewards.dtype)
    returns = torch.zeros_like(token_level_rewards)
    running = torch.zeros_like(token_level_rewards[:, 0])
    for t in reversed(range(token_level_rewards.shape[1])):
        updated = token_level_rewards[:, t] + gamma * running
        returns[:, t] = updated * mask[:, t]
        running = torch.where(mask[:, t] > 0, updated, running)
    return returns


def reinforce_plus_plus_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float,
                                  reduce_sum: ReduceSum = _local) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted returns per token, whitened over every response token of the global batch.
    Returns (whitened advantages, raw returns)."""
    returns = discounted_returns(token_level_rewards, response_mask, gamma)
    advantages = masked_whiten(returns, response_mask, reduce_sum) * response_mask
    return advantages, returns


def reinforce_plus_plus_baseline_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                           group_ids: Sequence, reduce_sum: ReduceSum = _local
                                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline: total reward minus its group's mean (a lone response keeps its reward, as in verl),
    broadcast to the response tokens, then whitened over every response token of the global batch."""
    scores = token_level_rewards.sum(dim=-1)
    mean = torch.zeros_like(scores)
    for rows in _groups(group_ids):
        if len(rows) > 1:
            mean[rows] = scores[rows].mean()
    centred = (scores - mean).unsqueeze(-1) * response_mask
    advantages = masked_whiten(centred, response_mask, reduce_sum) * response_mask
    return advantages, advantages


def gae_advantage(token_level_rewards: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor,
                  gamma: float, lam: float, reduce_sum: ReduceSum = _local) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE (Schulman et al. 2016) over the response tokens:
        delta_t = r_t + gamma * V_{t+1} - V_t,   A_t = delta_t + gamma * lam * A_{t+1},   returns_t = A_t + V_t,
    with V and A after the response end taken as 0 (masked positions are skipped, as in verl). Advantages are
    whitened over every response token of the global batch; returns (the critic's targets) are not."""
    mask = response_mask.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0])
    next_advantage = torch.zeros_like(values[:, 0])
    advantages = torch.zeros_like(values)
    for t in reversed(range(values.shape[1])):
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        # a masked position passes the later value and advantage through unchanged
        next_value = torch.where(mask[:, t] > 0, values[:, t], next_value)
        next_advantage = torch.where(mask[:, t] > 0, advantage, next_advantage)
        advantages[:, t] = next_advantage
    returns = (advantages + values) * mask
    advantages = masked_whiten(advantages, response_mask, reduce_sum) * mask
    return advantages, returns
