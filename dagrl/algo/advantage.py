"""Advantage estimators. Each maps token-level rewards to per-token advantages and returns."""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import torch


def grpo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, group_ids: Sequence,
                   norm_by_std: bool = True, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: each response's total reward minus its group's mean (divided by the group's std when asked).

    A group of one response gets advantage 0. Returns (advantages, returns), both [B, R], masked.
    """
    scores = token_level_rewards.sum(dim=-1)
    members: dict[object, list[int]] = defaultdict(list)
    for row, group in enumerate(group_ids):
        members[group].append(row)
    mean = torch.zeros_like(scores)
    std = torch.ones_like(scores)
    for rows in members.values():
        group_scores = scores[rows]
        if len(rows) > 1:
            mean[rows] = group_scores.mean()
            std[rows] = group_scores.std()
        else:
            mean[rows] = group_scores
    advantage = scores - mean
    if norm_by_std:
        # a group with equal rewards has advantage 0 exactly (no 0/0 when epsilon is 0)
        advantage = torch.where(std > 0, advantage / (std + epsilon), torch.zeros_like(advantage))
    advantages = advantage.unsqueeze(-1) * response_mask
    return advantages, advantages


ESTIMATORS = {"grpo": grpo_advantage}
