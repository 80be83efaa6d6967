"""dagrl's GRPO step math against verl 0.9.1's, whose formulas are restated below (CI has no verl), on random
data of the vs_verl learn job's shape: 32 prompts x 8 responses of 1..12 tokens, 0/1 scores with all-0 and all-1
groups, clip ratio 0.2, dual clip c = 3, token-mean. Also REINFORCE++'s returns on multi-turn masks, GRPO's groups
of one and the clipped value loss in bf16.

verl's sources: verl/trainer/ppo/core_algos.py (compute_grpo_outcome_advantage, compute_policy_loss_vanilla,
agg_loss), verl/utils/torch_functional.py (masked_sum), verl/workers/utils/losses.py (ppo_loss: the mini-batch's
dp_size and batch_num_tokens into agg_loss) and verl/workers/engine/fsdp/transformer_impl.py
(forward_backward_batch: batch_num_tokens = the mini-batch's loss_mask (= response_mask) summed over DP, one
unscaled backward per micro-batch; FSDP then averages the gradient over the DP ranks).

dagrl's step gradient is that of the sum of actor_loss over micro-batches and DP ranks (tests/engine checks the
Megatron engine applies exactly that gradient), with the token_weights dagrl/nodes/actor.py gives each mini-batch.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dagrl.algo.advantage import discounted_returns, grpo_advantage
from dagrl.algo.off_policy import sequence_keep
from dagrl.config.foreign_keys import rollout_correction_hint
from dagrl.algo.policy_loss import PolicyLossSpec, actor_loss, aggregation_counts, token_weights, vanilla_policy_loss
from dagrl.data.batch import Batch
from dagrl.nodes.critic import value_loss

PROMPTS, N, R = 32, 8, 12
ROWS = PROMPTS * N


# ---- verl 0.9.1's formulas, restated here ------------------------------------------------------------------
def verl_grpo_outcome_advantage(token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True):
    """Per group of responses to one prompt: (score - mean) / (unbiased std + epsilon), or score - mean; a group of
    one counts as mean 0, std 1. Broadcast over the response's tokens."""
    scores = token_level_rewards.sum(-1)
    groups = {key: [i for i, other in enumerate(index) if other == key] for key in dict.fromkeys(index)}
    advantages = torch.empty_like(scores)
    for rows in groups.values():
        group = scores[rows]
        mean, std = (group.mean(), group.std()) if len(rows) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        advantages[rows] = (group - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else group - mean
    advantages = advantages[:, None] * response_mask
    return advantages, advantages


def verl_reinforce_plus_plus_returns(token_level_rewards, response_mask, gamma):
    """compute_reinforce_plus_plus_outcome_advantage's scan (core_algos.py:718-726): a masked token gets return 0
    and carries the running return through unchanged."""
    returns = torch.zeros_like(token_level_rewards)
    running = 0
    for t in reversed(range(token_level_rewards.shape[1])):
        new_running = token_level_rewards[:, t] + gamma * running
        returns[:, t] = new_running * response_mask[:, t]
        running = new_running * response_mask[:, t] + running * (1 - response_mask[:, t])
    return returns


def verl_value_loss(vpreds, values, returns, cliprange_value):
    """compute_value_loss with token-mean over all tokens: clip_by_value(vpreds, values - c, values + c) is
    max(min(vpreds, values + c), values - c); returns (0.5 x the mean of the larger squared error, clip fraction)."""
    clipped = torch.max(torch.min(vpreds, values + cliprange_value), values - cliprange_value)
    losses1, losses2 = (vpreds - returns) ** 2, (clipped - returns) ** 2
    return 0.5 * torch.max(losses1, losses2).float().mean(), torch.gt(losses2, losses1).float().mean()


def verl_seq_mean_k1_keep(old_log_prob, rollout_log_prob, response_mask, threshold):
    """rollout_rs=seq_mean_k1 (rollout_corr_helper.py: compute_rollout_rejection_mask, _parse_rollout_rs_thresholds):
    k1 = -(log pi_old - log pi_rollout) per token, clamped at 20, its masked mean per sequence kept within
    [log L, log U] of the threshold 'L_U' ('U' alone: L = 1/U)."""
    lower, upper = map(float, threshold.split("_")) if "_" in threshold else (1 / float(threshold), float(threshold))
    k1 = -(old_log_prob - rollout_log_prob).clamp(-20.0, 20.0)
    stat = (k1 * response_mask).sum(-1) / (response_mask.sum(-1) + 1e-8)
    return (stat >= math.log(lower)) & (stat <= math.log(upper))


def verl_masked_sum(values, mask):
    """Padding may hold anything (even inf): it is replaced by 0 before the mask multiplies."""
    return (values.masked_fill(~mask.bool(), 0.0) * mask).sum()


def verl_vanilla_pg_losses(old_log_prob, log_prob, advantages, clip_ratio=0.2, clip_ratio_c=3.0):
    """PPO's clipped surrogate with verl's dual clip: a negative advantage's loss is capped at -A * c."""
    ratio = (log_prob - old_log_prob).clamp(-20.0, 20.0).exp()
    clipped = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_ratio, 1 + clip_ratio))
    return torch.where(advantages < 0, torch.min(clipped, -advantages * clip_ratio_c), clipped)


def verl_step_gradient(log_prob, old, adv, mask, ranks, micro_batches):
    """d(step loss)/d(log_prob) as verl's FSDP engine accumulates it: every micro-batch's masked sum divided by the
    mini-batch's token count over all DP ranks and multiplied by the DP size, one backward each; FSDP averages the
    ranks' gradients."""
    tokens = float(sum(mask[rows].sum() for rows in ranks))
    grads = []
    for rows in ranks:
        leaf = log_prob.detach().clone().requires_grad_()
        for part in micro_batches(len(rows)):
            idx = torch.as_tensor(rows[part])
            losses = verl_vanilla_pg_losses(old[idx], leaf[idx], adv[idx])
            (verl_masked_sum(losses, mask[idx]) / tokens * len(ranks)).backward()
        grads.append(leaf.grad)
    return sum(grads) / len(ranks)


# ---- dagrl --------------------------------------------------------------------------------------------------
def dagrl_step_gradient(log_prob, old, adv, mask, ranks, micro_batches):
    spec = PolicyLossSpec(clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0, loss_agg_mode="token-mean")
    tokens, sequences = sum(aggregation_counts(mask[rows]) for rows in ranks).tolist()
    leaf = log_prob.detach().clone().requires_grad_()
    total = 0.0
    for rows in ranks:
        for part in micro_batches(len(rows)):
            idx = torch.as_tensor(rows[part])
            micro = Batch(
                {
                    "token_weights": token_weights(mask[idx], "token-mean", tokens, sequences),
                    "advantages": adv[idx],
                    "old_log_probs": old[idx],
                    "response_mask": mask[idx],
                }
            )
            total = total + actor_loss(micro, leaf[idx], None, spec)[0]
    total.backward()
    return leaf.grad


# ---- data of the job's shape --------------------------------------------------------------------------------
def job_batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, R + 1, (ROWS,), generator=g)
    mask = (torch.arange(R)[None, :] < lengths[:, None]).float()
    success = torch.rand(PROMPTS, generator=g)
    success[:4] = torch.tensor([0.0, 1.0, 0.0, 1.0])  # groups scored all 0 and all 1
    scores = (torch.rand(PROMPTS, N, generator=g) < success[:, None]).float().reshape(-1)
    rewards = torch.zeros(ROWS, R)
    rewards[torch.arange(ROWS), lengths - 1] = scores  # the score on the last response token
    uid = [f"{i // N}" for i in range(ROWS)]
    old = -3.0 * torch.rand(ROWS, R, generator=g)
    log_prob = old + 0.3 * torch.randn(ROWS, R, generator=g)  # about half the tokens outside 1 +- 0.2
    log_prob = torch.where(torch.rand(ROWS, R, generator=g) < 0.05, old + 1.5, log_prob)  # ratio 4.5 > c = 3
    # finite garbage on the padding: it must not reach the loss or the gradient
    old = torch.where(mask.bool(), old, 5 * torch.randn(ROWS, R, generator=g))
    log_prob = torch.where(mask.bool(), log_prob, 5 * torch.randn(ROWS, R, generator=g))
    return mask, rewards, uid, old, log_prob


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_advantage_equals_verls(seed, norm_by_std):
    mask, rewards, uid, _, _ = job_batch(seed)
    # the advantage node's call: default epsilon
    adv, returns = grpo_advantage(rewards, mask, uid, norm_by_std=norm_by_std)
    want, _ = verl_grpo_outcome_advantage(
        rewards.clone(), mask, np.array(uid, dtype=object), norm_adv_by_std_in_grpo=norm_by_std
    )
    torch.testing.assert_close(adv, want, rtol=0, atol=1e-6)
    assert torch.equal(adv, returns)
    assert adv[: 4 * N].abs().max() == 0  # the all-0 and all-1 groups carry no signal on either side
    if norm_by_std:  # a lone success in 8: (1 - 1/8) / unbiased std sqrt(1/8) = 2.47
        assert adv.abs().max() > 2.0


@pytest.mark.parametrize("seed", [0, 1])
def test_vanilla_per_token_loss_equals_verls(seed):
    mask, rewards, uid, old, log_prob = job_batch(seed)
    adv, _ = grpo_advantage(rewards, mask, uid)
    loss, _ = vanilla_policy_loss(log_prob, old, adv, torch.ones_like(adv), PolicyLossSpec())
    want = verl_vanilla_pg_losses(old, log_prob, adv)
    valid = mask.bool()
    dual = valid & (adv < 0) & ((log_prob - old).exp() > 3.0)
    assert dual.sum() > 10  # the dual-clip branch is exercised
    torch.testing.assert_close(loss[valid], want[valid], rtol=0, atol=1e-6)


def _rows(ranks: int) -> list[np.ndarray]:
    return np.array_split(np.arange(ROWS), ranks)


LAYOUTS = {
    "dp1, 4 micro-batches of 64": (1, lambda n: [slice(i, i + 64) for i in range(0, n, 64)]),
    "dp1, uneven micro-batches": (1, lambda n: [slice(0, 13), slice(13, 83), slice(83, 184), slice(184, n)]),
    "dp2, uneven micro-batches": (2, lambda n: [slice(0, 9), slice(9, 50), slice(50, n)]),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("seed", [0, 1])
def test_step_gradient_equals_verls_token_mean_over_the_mini_batch(seed, layout):
    """The whole optimizer step's gradient w.r.t. every per-token log-prob: verl divides every micro-batch's sum by
    the mini-batch's token count (never the micro-batch's), so the split does not matter; neither may it in dagrl."""
    mask, rewards, uid, old, log_prob = job_batch(seed)
    adv, _ = grpo_advantage(rewards, mask, uid)
    dp, micro_batches = LAYOUTS[layout]
    got = dagrl_step_gradient(log_prob, old, adv, mask, _rows(dp), micro_batches)
    want = verl_step_gradient(log_prob, old, adv, mask, _rows(dp), micro_batches)
    assert want.abs().max() > 1e-3  # the gradient is not trivially small (about 1 / 1,700 tokens per unit of A)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-9)
    assert got[~mask.bool()].abs().max() == 0  # padding gets no gradient


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_plus_plus_returns_equal_verls_on_multi_turn_masks(seed, gamma):
    """Responses of several assistant turns: tool observations (mask 0) inside the response, padding after it,
    rewards on masked tokens too (they must not count)."""
    mask, rewards, _, _, _ = job_batch(seed)
    g = torch.Generator().manual_seed(seed + 10)
    mask = mask * (torch.rand(ROWS, R, generator=g) > 0.3).float()  # holes inside the responses
    rewards = rewards + (torch.rand(ROWS, R, generator=g) < 0.1).float()
    assert ((mask[:, :-1] == 0) & (mask[:, 1:] == 1)).any()  # a masked token before a sampled one
    got = discounted_returns(rewards, mask, gamma)
    torch.testing.assert_close(got, verl_reinforce_plus_plus_returns(rewards, mask, gamma), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_groups_of_one_and_two_equal_verls(norm_by_std):
    mask, rewards, _, _, _ = job_batch(0)
    uid = [f"{i // 2}" if i < ROWS // 2 else f"lone{i}" for i in range(ROWS)]  # pairs, then groups of one
    adv, _ = grpo_advantage(rewards, mask, uid, norm_by_std=norm_by_std)
    want, _ = verl_grpo_outcome_advantage(
        rewards.clone(), mask, np.array(uid, dtype=object), norm_adv_by_std_in_grpo=norm_by_std
    )
    torch.testing.assert_close(adv, want, rtol=0, atol=1e-6)
    assert adv[ROWS // 2 :].abs().max() > 0.9  # a lone success keeps its score


def test_value_clip_equals_verls_in_bf16():
    """Five values within the clip range whose difference from the old value rounds in bf16, returns equal to
    them: verl's clamp keeps each value exactly, so none counts as clipped (old + clamp(v - old) rounded each and
    counted all five). A sixth, 0.5 from its old value, is clipped to 0.2 and counts."""
    old = torch.tensor([[0.0947265625, -0.099609375, -0.091796875, -0.018798828125, 0.1357421875, 0.0]])
    new = torch.tensor([[-0.0218505859375, 0.01251220703125, 0.04833984375, -0.11083984375, -0.01556396484375, 0.5]])
    returns = torch.cat([new[:, :5], torch.ones(1, 1)], dim=1)
    old, new, returns = old.bfloat16(), new.bfloat16(), returns.bfloat16()
    weights = torch.full((1, 6), 1 / 6)
    batch = Batch({"values": old, "returns": returns, "token_weights": weights, "token_mean_weights": weights})
    loss, metrics = value_loss(batch, new, None, cliprange_value=0.2)
    want_loss, want_clipfrac = verl_value_loss(new, old, returns, 0.2)
    assert metrics["critic/vf_clipfrac"].item() == want_clipfrac.item() == pytest.approx(1 / 6)
    assert loss.item() == pytest.approx(want_loss.item(), rel=1e-6)


@pytest.mark.parametrize("threshold", ["0.8_1.25", "0.5_1.1", "1.2"])
def test_seq_mean_k1_rejection_is_the_band_its_key_hint_names(threshold):
    """The line answering verl's rollout_rs_threshold names mis_ratio_low/high; they keep exactly the sequences
    verl's seq_mean_k1 keeps."""
    mask, _, _, old, _ = job_batch(0)
    rollout = old - 0.3 * torch.randn(ROWS, R, generator=torch.Generator().manual_seed(3))
    hint = rollout_correction_hint("algorithm.rollout_correction.rollout_rs_threshold", threshold)
    low, high = (float(hint.split(f"mis_ratio_{side}=")[1].split()[0]) for side in ("low", "high"))
    want = verl_seq_mean_k1_keep(old, rollout, mask, threshold)
    assert 0 < want.sum() < ROWS  # some sequences kept, some rejected
    assert torch.equal(sequence_keep(old, rollout, mask, low, high), want)
