"""Advantages, KL estimators and the policy loss against hand-computed values."""
import math

import pytest
import torch

from dagrl.algo.advantage import grpo_advantage
from dagrl.algo.kl import KLController, kl_penalty
from dagrl.algo.policy_loss import PolicyLossSpec, actor_loss, token_weights, vanilla_policy_loss
from dagrl.data.batch import Batch


def test_grpo_advantage_normalised_by_group_std():
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0, 1.0])  # groups: (1, 0) and (1, 1)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    adv, returns = grpo_advantage(rewards, mask, ["a", "a", "b", "b"], norm_by_std=True, epsilon=0.0)
    std = math.sqrt(0.5)  # unbiased std of (1, 0)
    assert adv[0].tolist() == pytest.approx([0.5 / std] * 3)
    assert adv[1].tolist() == pytest.approx([-0.5 / std, -0.5 / std, 0.0])
    assert adv[2:].abs().sum() == 0  # equal rewards in a group: no signal
    assert torch.equal(adv, returns)


def test_grpo_advantage_without_std_and_singleton_group():
    rewards = torch.tensor([[0.0, 3.0], [0.0, 1.0], [0.0, 5.0]])
    mask = torch.ones(3, 2)
    adv, _ = grpo_advantage(rewards, mask, [0, 0, 1], norm_by_std=False)
    assert adv[:, 0].tolist() == pytest.approx([1.0, -1.0, 0.0])


@pytest.mark.parametrize("kind,expected", [
    ("k1", 0.5), ("kl", 0.5), ("abs", 0.5), ("k2", 0.125), ("mse", 0.125),
    ("k3", math.exp(-0.5) + 0.5 - 1.0), ("low_var_kl", math.exp(-0.5) + 0.5 - 1.0),
])
def test_kl_estimators(kind, expected):
    value = kl_penalty(torch.tensor([-1.0]), torch.tensor([-1.5]), kind)
    assert value.item() == pytest.approx(expected, rel=1e-6)


def test_kl_unknown_estimator_is_an_error():
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "k9")


def test_adaptive_kl_controller_moves_towards_target():
    ctrl = KLController("adaptive", kl_coef=0.1, target_kl=0.1, horizon=100)
    ctrl.update(current_kl=0.2, n_steps=10)  # too much KL: error clipped to 0.2 -> coef * (1 + 0.02)
    assert ctrl.value == pytest.approx(0.1 * 1.02)
    fixed = KLController("fixed", 0.1, 0.1, 100)
    fixed.update(5.0, 10)
    assert fixed.value == 0.1


def test_vanilla_policy_loss_clip_and_dual_clip():
    old = torch.zeros(4)
    log_prob = torch.log(torch.tensor([1.5, 0.5, 1.1, 10.0]))
    adv = torch.tensor([1.0, 1.0, -2.0, -1.0])
    loss, terms = vanilla_policy_loss(log_prob, old, adv, clip_low=0.2, clip_high=0.2, clip_c=3.0)
    # token 0: ratio 1.5, A>0 -> max(-1.5, -1.2) = -1.2 (clipped)
    # token 1: ratio 0.5, A>0 -> max(-0.5, -0.8) = -0.5
    # token 2: ratio 1.1, A<0 -> max(2.2, 2.2) = 2.2, min(6, 2.2) = 2.2
    # token 3: ratio 10, A<0 -> max(10, 1.2) = 10, dual clip min(3, 10) = 3
    assert loss.tolist() == pytest.approx([-1.2, -0.5, 2.2, 3.0], rel=1e-6)
    assert terms["actor/pg_clipfrac"].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert terms["actor/pg_clipfrac_lower"].tolist() == [0.0, 0.0, 0.0, 1.0]


def test_token_mean_is_global_over_micro_batches():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    weights = token_weights(mask, "token-mean", global_tokens=8.0)  # 4 more tokens live on another rank
    assert weights.sum().item() == pytest.approx(0.5)
    assert weights[0, 3] == 0


def test_actor_loss_gradient_equals_global_token_mean():
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]])
    adv = torch.randn(3, 3)
    old = torch.randn(3, 3) * 0.1
    spec = PolicyLossSpec(entropy_coeff=0.01)
    full = Batch({"response_mask": mask, "advantages": adv, "old_log_probs": old,
                  "token_weights": token_weights(mask, "token-mean", float(mask.sum()))})
    logp = (old + 0.05 * torch.randn(3, 3)).requires_grad_()
    entropy = torch.rand(3, 3)
    whole, _ = actor_loss(full, logp, entropy, spec)
    (grad_whole,) = torch.autograd.grad(whole, logp)
    # the same data in micro-batches of 1 row, summed, gives the same loss and gradient
    parts = [actor_loss(full.select([i]), logp[i:i + 1], entropy[i:i + 1], spec)[0] for i in range(3)]
    (grad_parts,) = torch.autograd.grad(sum(parts), logp)
    assert sum(parts).item() == pytest.approx(whole.item(), rel=1e-6)
    assert torch.allclose(grad_whole, grad_parts)
    # a mean of micro-batch means would differ here (rows have 3, 1, 2 tokens)
    mean_of_means = sum(((-adv[i] * torch.exp(logp[i] - old[i])) * mask[i]).sum() / mask[i].sum()
                        for i in range(3)) / 3
    pg_only, _ = actor_loss(full, logp, None, PolicyLossSpec(clip_ratio_low=10, clip_ratio_high=10))
    assert not math.isclose(pg_only.item(), mean_of_means.item(), rel_tol=1e-3)


def test_actor_loss_kl_term():
    mask = torch.ones(1, 2)
    batch = Batch({"response_mask": mask, "advantages": torch.zeros(1, 2), "old_log_probs": torch.zeros(1, 2),
                   "ref_log_prob": torch.tensor([[-0.5, -0.5]]), "token_weights": mask / 2})
    spec = PolicyLossSpec(use_kl_loss=True, kl_loss_coef=0.1, kl_loss_type="k1")
    loss, metrics = actor_loss(batch, torch.zeros(1, 2), None, spec)
    assert metrics["actor/kl_loss"].item() == pytest.approx(0.5)
    assert loss.item() == pytest.approx(0.05)
