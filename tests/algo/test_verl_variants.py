"""verl 0.9's further estimators, policy losses, straight-through KL estimators and token-sum aggregation, each against
values worked out by hand from verl's formula (verl/trainer/ppo/core_algos.py at v0.9.0; the function and its lines
are named in each test)."""

import math
from types import SimpleNamespace

import pytest
import torch

from dagrl.algo.advantage import AdvantageInputs, gpg, grpo_passk, opo, remax
from dagrl.algo.kl import kl_penalty
from dagrl.algo.policy_loss import PolicyLossSpec, actor_loss, token_weights
from dagrl.algo.policy_variants import (
    clip_cov_policy_loss,
    dppo_kl_policy_loss,
    dppo_tv_policy_loss,
    geo_mean_policy_loss,
    gpg_policy_loss,
    kl_cov_policy_loss,
    sapo_policy_loss,
)
from dagrl.config.errors import ConfigError
from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.config.validate import preflight
from dagrl.data.batch import Batch


def close(actual: torch.Tensor, expected) -> None:
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), rtol=1e-5, atol=1e-6)


def test_opo_baseline_is_the_length_weighted_group_mean():
    # compute_opo_outcome_advantage (lines 639-690): group a scores 1, 0 with 2 and 1 response tokens ->
    # baseline (2 * 1 + 1 * 0) / 3 = 2/3, advantages 1/3 and -2/3; group b is one response: baseline 0, keeps 3
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [3.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    advantages, returns = opo(AdvantageInputs(rewards, mask, ["a", "a", "b"]), None)
    close(advantages, [[1 / 3, 1 / 3, 0.0], [-2 / 3, 0.0, 0.0], [3.0, 3.0, 3.0]])
    assert torch.equal(returns, advantages)


def test_remax_is_the_return_to_go_minus_the_greedy_score():
    # compute_remax_outcome_advantage: returns = reverse cumsum of rewards x mask, advantages = returns - baseline x
    # mask. Row a: reward 1 at its last token, greedy score 0.25 -> returns 1, advantages 0.75 at each token; row b:
    # 0.5 at its second token, one masked token, greedy score 1 -> returns [0.5, 0.5, 0], advantages [-0.5, -0.5, 0]
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.5, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    advantages, returns = remax(
        AdvantageInputs(rewards, mask, ["a", "b"], baselines=torch.tensor([0.25, 1.0])), SimpleNamespace()
    )
    close(returns, [[1.0, 1.0, 1.0], [0.5, 0.5, 0.0]])
    close(advantages, [[0.75, 0.75, 0.75], [-0.5, -0.5, 0.0]])


@pytest.mark.parametrize("norm_by_std,best", [(True, 0.5 / (0.5 + 1e-6)), (False, 0.5)])
def test_grpo_passk_only_the_best_response_learns_its_margin(norm_by_std, best):
    # compute_grpo_passk_outcome_advantage (lines 471-530): group a scores 1, 0, 0.5 -> r_max - r_second = 0.5,
    # unbiased std of (1, 0, 0.5) = sqrt(((.5)^2 + (.5)^2 + 0) / 2) = 0.5 -> 0.5 / (0.5 + 1e-6) to the best only;
    # group b ties at 2, 2: margin 0
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 0.5], [2.0, 0.0], [0.0, 2.0]])
    mask = torch.tensor([[1, 1], [1, 1], [1, 0], [1, 1], [1, 1]])
    algorithm = SimpleNamespace(norm_adv_by_std_in_grpo=norm_by_std)
    advantages, _ = grpo_passk(AdvantageInputs(rewards, mask, ["a", "a", "a", "b", "b"]), algorithm)
    close(advantages, [[best, best], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="2 or more responses"):
        grpo_passk(AdvantageInputs(rewards[:1], mask[:1], ["a"]), algorithm)


def test_gpg_scales_centred_scores_by_the_global_batch():
    # compute_gpg_outcome_advantage (lines 770-830): alpha = responses / non-zero scores; group means a .5,
    # b 2, lone c 0. This shard: scores 1, 0 | 3, 1 | 2 (4 non-zero of 5); alone alpha = 5/4
    rewards = torch.tensor([[1.0], [0.0], [3.0], [1.0], [2.0]])
    mask, ids = torch.ones(5, 1), ["a", "a", "b", "b", "c"]
    advantages, _ = gpg(AdvantageInputs(rewards, mask, ids), None)
    close(advantages.squeeze(-1), [0.625, -0.625, 1.25, -1.25, 2.5])
    # another data-parallel shard holds 3 responses scoring 0: globally 8 responses, 4 non-zero -> alpha 2
    other = torch.tensor([3.0, 0.0], dtype=torch.float64)
    advantages, _ = gpg(AdvantageInputs(rewards, mask, ids, reduce_sum=lambda part: part + other), None)
    close(advantages.squeeze(-1), [1.0, -1.0, 2.0, -2.0, 4.0])


def test_geo_mean_clips_token_log_ratios_and_takes_the_geometric_mean():
    # compute_policy_loss_geo_mean (lines 1927-2010), clip 0.2 both sides:
    # row 0, A = +1, log ratios .5, -.1 -> min(lr, clamp(lr)) = .2, -.1 -> ratio e^.05, loss -e^.05;
    #   gradient: only the unclipped token, -A * e^.05 / 2
    # row 1, A = -1, log ratios .5, -.5 (third token padded) -> -min(-lr, -clamp(lr)) = .5, -.2 -> ratio e^.15,
    #   loss +e^.15; gradient on the first token only, e^.15 / 2
    old = torch.zeros(2, 3)
    log_prob = torch.tensor([[0.5, -0.1, 0.0], [0.5, -0.5, 9.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 0.0], [-1.0, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    loss, terms = geo_mean_policy_loss(log_prob, old, adv, mask, PolicyLossSpec(loss_mode="geo_mean"))
    close(loss[:, 0], [-math.exp(0.05), math.exp(0.15)])
    assert torch.equal(loss[:, 0], loss[:, 1])  # a per-sequence loss at each of its tokens
    weights = token_weights(mask, "seq-mean-token-mean", 4.0, 2.0)  # the aggregation geo_mean fixes
    (grad,) = torch.autograd.grad((loss * weights).sum(), log_prob)
    close(grad, [[0.0, -math.exp(0.05) / 2 / 2, 0.0], [math.exp(0.15) / 2 / 2, 0.0, 0.0]])
    assert terms["actor/pg_clipfrac"][:, :2].tolist() == [[1.0, 0.0], [0.0, 0.0]]
    assert terms["actor/pg_clipfrac_lower"][:, :2].tolist() == [[0.0, 0.0], [1.0, 1.0]]


def _cov_batch():
    # advantages 3, -1, -1, -1 (mean 0) and log-probs -.1, -1.1, -1.1, -1.1 (mean -.6) over the mask; the padded
    # fifth token would move both means. Centred products: 1.5, .5, .5, .5
    adv = torch.tensor([[3.0, -1.0, -1.0, -1.0, 7.0]])
    log_prob = torch.tensor([[-0.1, -1.1, -1.1, -1.1, -5.0]], requires_grad=True)
    return adv, log_prob, torch.tensor([[1, 1, 1, 1, 0]])


def test_clip_cov_drops_the_tokens_of_covariance_between_its_bounds():
    # compute_policy_loss_clip_cov (lines 1742-1845): on-policy (ratio 1, nothing clipped by PPO); only token 0's
    # covariance 1.5 lies in (clip_cov_lb, clip_cov_ub) = (1, 5); max(int(.0002 * 4), 1) = 1 token is dropped:
    # loss 0 there, -A * ratio = 1 elsewhere; the gradient -A * ratio on the kept tokens
    adv, log_prob, mask = _cov_batch()
    loss, terms = clip_cov_policy_loss(log_prob, log_prob.detach(), adv, mask, PolicyLossSpec(loss_mode="clip_cov"))
    close(loss[:, :4], [[0.0, 1.0, 1.0, 1.0]])
    (grad,) = torch.autograd.grad((loss * mask).sum(), log_prob)
    close(grad, [[0.0, 1.0, 1.0, 1.0, 0.0]])
    assert terms["actor/pg_clipfrac"].tolist() == [[1.0, 0.0, 0.0, 0.0, 0.0]]
    # lower bound 0.4: all four are candidates, still one is dropped
    loss, _ = clip_cov_policy_loss(
        log_prob, log_prob.detach(), adv, mask, PolicyLossSpec(loss_mode="clip_cov", clip_cov_lb=0.4)
    )
    assert (loss[:, :4] == 0).sum() == 1


def test_kl_cov_penalises_the_tokens_of_largest_covariance():
    # compute_policy_loss_kl_cov (lines 1847-1925): log ratios .2, .1, 0, 0; top max(1, int(4 * .0002)) = 1
    # covariance is token 0: loss -3 e^.2 + ppo_kl_coef .1 * |.2|; others -A e^lr = e^.1, 1, 1
    adv, log_prob, mask = _cov_batch()
    old = log_prob.detach() - torch.tensor([[0.2, 0.1, 0.0, 0.0, 0.0]])
    loss, terms = kl_cov_policy_loss(log_prob, old, adv, mask, PolicyLossSpec(loss_mode="kl_cov"))
    close(loss[:, :4], [[-3 * math.exp(0.2) + 0.02, math.exp(0.1), 1.0, 1.0]])
    (grad,) = torch.autograd.grad((loss * mask).sum(), log_prob)
    close(grad[:, :4], [[-3 * math.exp(0.2) + 0.1, math.exp(0.1), 1.0, 1.0]])
    close(terms["actor/ppo_kl"][:, :4], [[0.2, 0.1, 0.0, 0.0]])


def test_gpg_loss_is_the_plain_policy_gradient():
    # compute_policy_loss_gpg (lines 1706-1740): -log_prob * A
    log_prob = torch.tensor([-0.5, -2.0], requires_grad=True)
    loss, _ = gpg_policy_loss(
        log_prob, torch.tensor([-9.0, 0.0]), torch.tensor([2.0, -1.0]), torch.ones(2), PolicyLossSpec(loss_mode="gpg")
    )
    close(loss, [1.0, -2.0])
    close(torch.autograd.grad(loss.sum(), log_prob)[0], [-2.0, 1.0])


def test_sapo_gate_by_hand_and_ppos_gradient_on_policy():
    # compute_policy_loss_sapo (lines 1621-1705): -A * sigmoid(tau (r - 1)) * 4 / tau, tau_pos 1 for A > 0,
    # tau_neg 1.05 otherwise
    def gate(r, tau):
        return 4 / tau / (1 + math.exp(-tau * (r - 1)))

    log_prob = torch.tensor([0.2, -0.3, 0.0, 0.0], requires_grad=True)
    adv = torch.tensor([1.0, -2.0, 1.5, -0.5])
    loss, _ = sapo_policy_loss(log_prob, torch.zeros(4), adv, torch.ones(4), PolicyLossSpec(loss_mode="sapo"))
    close(loss, [-gate(math.exp(0.2), 1.0), 2 * gate(math.exp(-0.3), 1.05), -1.5 * gate(1, 1.0), 0.5 * gate(1, 1.05)])
    # at ratio 1 the gate's slope is 4 * sigmoid'(0) = 1: PPO's gradient -A
    close(torch.autograd.grad(loss.sum(), log_prob)[0][2:], [-1.5, 0.5])


def _dppo_batch():
    # old probability .5 everywhere; new .8, .75 (A > 0) and .2, .45 (A < 0)
    old = torch.full((4,), math.log(0.5))
    log_prob = torch.log(torch.tensor([0.8, 0.75, 0.2, 0.45])).requires_grad_()
    return log_prob, old, torch.tensor([1.0, 1.0, -1.0, -1.0])


def test_dppo_tv_masks_tokens_whose_probability_moved_past_the_bound():
    # compute_policy_loss_dppo_tv (lines 1379-1458), bounds .2: p - p_old = .3, .25 (A > 0: <= .2? no, no),
    # -.3, -.05 (A < 0: >= -.2? no, yes) -> only token 3 is kept: -A * sg[min(r, 3)] * log p = .9 * log .45,
    # gradient -A * r = .9
    log_prob, old, adv = _dppo_batch()
    loss, terms = dppo_tv_policy_loss(log_prob, old, adv, torch.ones(4), PolicyLossSpec(loss_mode="dppo_tv"))
    close(loss, [0.0, 0.0, 0.0, 0.9 * math.log(0.45)])
    close(torch.autograd.grad(loss.sum(), log_prob)[0], [0.0, 0.0, 0.0, 0.9])
    assert terms["actor/pg_clipfrac"].tolist() == [1.0, 1.0, 1.0, 0.0]


def test_dppo_kl_bounds_the_binary_kl_instead():
    # compute_policy_loss_dppo_kl (lines 1460-1543): binary KL from p_old .5 to p is
    # .5 log(.5 / p) + .5 log(.5 / (1 - p)): p = .8 -> .2231 > .2 (rose, A > 0: masked); p = .75 -> .1438 (kept);
    # p = .2 -> .2231 (fell, A < 0: masked); p = .45 -> .0050 (kept). Kept: -A * r * log p with r = 1.5 and .9
    log_prob, old, adv = _dppo_batch()
    loss, _ = dppo_kl_policy_loss(log_prob, old, adv, torch.ones(4), PolicyLossSpec(loss_mode="dppo_kl"))
    close(loss, [0.0, -1.5 * math.log(0.75), 0.0, 0.9 * math.log(0.45)])
    close(torch.autograd.grad(loss.sum(), log_prob)[0], [0.0, -1.5, 0.0, 0.9])


K3 = math.exp(-0.5) + 0.5 - 1.0


@pytest.mark.parametrize("kind,value", [("k1+", 0.5), ("kl+", 0.5), ("abs+", 0.5), ("k3+", K3), ("low_var_kl+", K3)])
def test_straight_through_kl_has_its_value_and_k2s_gradient(kind, value):
    # kl_penalty (lines 2187-2212): backward_score - backward_score.detach() + forward_score.detach(), the backward
    # score k2 = (logp - ref)^2 / 2, whose gradient is logp - ref = .5 (k3's own would be 1 - e^-.5 = .39)
    log_prob = torch.tensor([-1.0], requires_grad=True)
    kl = kl_penalty(log_prob, torch.tensor([-1.5]), kind)
    assert kl.item() == pytest.approx(value, rel=1e-6)
    assert torch.autograd.grad(kl.sum(), log_prob)[0].item() == pytest.approx(0.5)


def test_token_sum_is_the_plain_sum_over_the_mini_batch():
    # agg_loss token-sum (lines 1176-1180): masked_sum(loss) * dp_size, i.e. the sum over every token of the
    # mini-batch; here two micro-batches of one row each add up to it
    log_prob = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    spec = PolicyLossSpec(loss_mode="gpg", loss_agg_mode="token-sum")
    total = 0.0
    for row in range(2):
        micro = Batch(
            {
                "response_mask": mask[row : row + 1],
                "advantages": torch.ones(1, 2),
                "old_log_probs": log_prob[row : row + 1],
                "token_weights": token_weights(mask[row : row + 1], "token-sum", 3.0, 2.0),
            }
        )
        total += actor_loss(micro, log_prob[row : row + 1], None, spec)[0].item()
    assert total == pytest.approx(1.0 + 2.0 + 0.5)


def test_preflight_takes_the_new_names_and_refuses_passk_without_a_second_response():
    def first_key(*overrides):
        with pytest.raises(ConfigError) as info:
            preflight(Cfg(compose(list(overrides))))
        return info.value

    for overrides in (
        ("algorithm.adv_estimator=opo",),
        ("algorithm.adv_estimator=gpg", "actor_rollout_ref.actor.policy_loss.loss_mode=gpg"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode=kl_cov", "actor_rollout_ref.actor.loss_agg_mode=token-sum"),
        ("actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_type=k3+"),
    ):
        assert first_key("actor_rollout_ref.rollout.n=2", *overrides).key == "actor_rollout_ref.model.path"
    error = first_key("actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=grpo_passk")
    assert error.key == "actor_rollout_ref.rollout.n" and "second best" in str(error) and "2 or more" in str(error)
    error = first_key("actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.policy_loss.clip_cov_lb=6")
    assert error.key == "actor_rollout_ref.actor.policy_loss.clip_cov_lb" and "below" in str(error)
