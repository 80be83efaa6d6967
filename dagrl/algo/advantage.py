"""Advantage estimators. Each maps token-level rewards [B, R] to per-token (advantages, returns), both [B, R].

Group statistics (GRPO, RLOO, REINFORCE++-baseline) stay on one rank: a prompt's responses are never split over
data-parallel ranks before advantages are computed. Whitening statistics are batch-wide, so they are taken over
the whole global batch through `reduce_sum`, which sums a small float64 tensor of partial sums over the
data-parallel ranks (identity in a single process): the result does not depend on how the batch is sharded.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

ReduceSum = Callable[[torch.Tensor], torch.Tensor]


def _local(values: torch.Tensor) -> torch.Tensor:
    return values


@dataclass(frozen=True)
class AdvantageInputs:
    """What an estimator registered in dagrl/algo/catalog.py receives, with the `algorithm` config section."""

    token_level_rewards: torch.Tensor  # [B, R]
    response_mask: torch.Tensor  # [B, R]; the loss mask where sequence masking rejected some
    group_ids: Sequence  # [B]: the prompt each response answers
    values: torch.Tensor | None = None  # [B, R]: the critic's, for estimators that declare needs=("values",)
    reduce_sum: ReduceSum = _local  # sums a float64 tensor over the data-parallel ranks
    baselines: torch.Tensor | None = None  # [B]: the prompt's greedy response's score, needs=("reward_baselines",)

    @property
    def scores(self) -> torch.Tensor:
        return self.token_level_rewards.sum(dim=-1)


def _groups(group_ids: Sequence) -> list[list[int]]:
    members: dict[object, list[int]] = defaultdict(list)
    for row, group in enumerate(group_ids):
        members[group].append(row)
    return list(members.values())


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, reduce_sum: ReduceSum = _local, epsilon: float = 1e-8
) -> torch.Tensor:
    """(values - mean) / sqrt(var + epsilon) with the mean and the unbiased variance over masked entries of the
    global batch (verl's masked_whiten, made global). Two reductions: the mean first, then squared deviations
    around it, which is exact where sum-of-squares minus squared-sum would cancel."""
    exact, mask = values.double(), mask.double()  # float64 partial sums: sharding barely changes the rounding
    count, total = reduce_sum(torch.stack([mask.sum(), (exact * mask).sum()])).tolist()
    mean = total / max(count, 1.0)
    squares = reduce_sum((((exact - mean) ** 2) * mask).sum().reshape(1)).item()
    variance = squares / (count - 1) if count > 1 else 0.0  # one token: it is the mean, whitened to 0
    return ((exact - mean) / (variance + epsilon) ** 0.5).to(values.dtype)


def grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: Sequence,
    norm_by_std: bool = True,
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
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


def rloo_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, group_ids: Sequence
) -> tuple[torch.Tensor, torch.Tensor]:
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


def discounted_returns(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float) -> torch.Tensor:
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


def reinforce_plus_plus_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float, reduce_sum: ReduceSum = _local
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted returns per token, whitened over every response token of the global batch.
    Returns (whitened advantages, raw returns)."""
    returns = discounted_returns(token_level_rewards, response_mask, gamma)
    advantages = masked_whiten(returns, response_mask, reduce_sum) * response_mask
    return advantages, returns


def reinforce_plus_plus_baseline_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, group_ids: Sequence, reduce_sum: ReduceSum = _local
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


def gae_advantage(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
    reduce_sum: ReduceSum = _local,
) -> tuple[torch.Tensor, torch.Tensor]:
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


# The registered estimators (dagrl/algo/catalog.py): fn(inputs, algorithm) -> (advantages, returns).
def grpo(inputs: AdvantageInputs, algorithm: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return grpo_advantage(
        inputs.token_level_rewards,
        inputs.response_mask,
        inputs.group_ids,
        norm_by_std=algorithm.norm_adv_by_std_in_grpo,
    )


def rloo(inputs: AdvantageInputs, algorithm: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return rloo_advantage(inputs.token_level_rewards, inputs.response_mask, inputs.group_ids)


def reinforce_plus_plus(inputs: AdvantageInputs, algorithm: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return reinforce_plus_plus_advantage(
        inputs.token_level_rewards, inputs.response_mask, algorithm.gamma, inputs.reduce_sum
    )


def reinforce_plus_plus_baseline(inputs: AdvantageInputs, algorithm: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return reinforce_plus_plus_baseline_advantage(
        inputs.token_level_rewards, inputs.response_mask, inputs.group_ids, inputs.reduce_sum
    )


def gae(inputs: AdvantageInputs, algorithm: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return gae_advantage(
        inputs.token_level_rewards,
        inputs.values,
        inputs.response_mask,
        algorithm.gamma,
        algorithm.lam,
        inputs.reduce_sum,
    )


def _broadcast(per_response: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    advantages = per_response.unsqueeze(-1) * mask
    return advantages, advantages


def opo(inputs: AdvantageInputs, algorithm: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO: score minus the group's length-weighted mean score sum_j L_j r_j / sum_j L_j (L: response tokens);
    a lone response's baseline is 0."""
    scores, lengths = inputs.scores, inputs.response_mask.sum(dim=-1).to(inputs.scores.dtype)
    baseline = torch.zeros_like(scores)
    for rows in _groups(inputs.group_ids):
        if len(rows) > 1:
            baseline[rows] = (lengths[rows] * scores[rows]).sum() / lengths[rows].sum()
    return _broadcast(scores - baseline, inputs.response_mask)


def grpo_passk(inputs: AdvantageInputs, algorithm: Any, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k: each group's best response gets r_max - r_second (over the group's unbiased std + epsilon with
    norm_adv_by_std_in_grpo), every other response 0; a tie for the best gives the group 0."""
    scores = inputs.scores
    advantage = torch.zeros_like(scores)
    for rows in _groups(inputs.group_ids):
        if len(rows) < 2:
            raise ValueError(f"grpo_passk needs 2 or more responses per prompt; a group has {len(rows)}")
        top = torch.topk(scores[rows], 2)
        margin = top.values[0] - top.values[1]
        if algorithm.norm_adv_by_std_in_grpo:
            margin = margin / (scores[rows].std() + epsilon)
        advantage[rows[int(top.indices[0])]] = margin
    return _broadcast(advantage, inputs.response_mask)


def gpg(inputs: AdvantageInputs, algorithm: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG: alpha * (score - group mean), alpha = responses / responses with a non-zero score over the global
    batch (verl's f_norm is 1); a lone response's mean is 0."""
    scores = inputs.scores
    count, nonzero = inputs.reduce_sum(
        torch.tensor([scores.numel(), torch.count_nonzero(scores).item()], dtype=torch.float64)
    ).tolist()
    mean = torch.zeros_like(scores)
    for rows in _groups(inputs.group_ids):
        if len(rows) > 1:
            mean[rows] = scores[rows].mean()
    return _broadcast(count / max(nonzero, 1.0) * (scores - mean), inputs.response_mask)


def remax(inputs: AdvantageInputs, algorithm: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (verl 0.9's compute_remax_outcome_advantage, core_algos.py): each token's undiscounted return to go
    minus the score of the prompt's greedy response, which the rollout node generates and scores; not whitened."""
    mask = inputs.response_mask
    returns = (inputs.token_level_rewards * mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
    return returns - inputs.baselines.to(returns.dtype).unsqueeze(-1) * mask, returns
