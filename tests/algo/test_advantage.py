"""Advantage estimators against hand-computed values, the advantage node's dispatch, and the estimator keys'
pre-flight checks."""

import math
from types import SimpleNamespace

import pytest
import torch

from dagrl.algo.catalog import ADV_ESTIMATORS
from dagrl.algo.advantage import (
    discounted_returns,
    gae_advantage,
    grpo_advantage,
    masked_whiten,
    reinforce_plus_plus_advantage,
    reinforce_plus_plus_baseline_advantage,
    rloo_advantage,
)
from dagrl.config.errors import ConfigError
from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.config.schema.check import choices_of
from dagrl.config.validate import preflight
from dagrl.data.batch import Batch
from dagrl.nodes.advantage import compute_advantage
from tests.helpers import node_context


def close(actual: torch.Tensor, expected: list) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), rtol=1e-5, atol=1e-6)


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


@pytest.mark.parametrize("norm_by_std,lone", [(False, 5.0), (True, 5.0 / (1 + 1e-6))])
def test_grpo_advantage_of_a_group_of_one_is_its_raw_score(norm_by_std, lone):
    # verl counts a group of one as mean 0, std 1: the lone response keeps its score 5 (over 1 + epsilon when
    # normalised), not 0 as its own mean would give
    rewards = torch.tensor([[0.0, 3.0], [0.0, 1.0], [0.0, 5.0]])
    mask = torch.ones(3, 2)
    adv, _ = grpo_advantage(rewards, mask, [0, 0, 1], norm_by_std=norm_by_std)
    pair = 1.0 / (math.sqrt(2.0) + 1e-6) if norm_by_std else 1.0  # (3, 1): mean 2, unbiased std sqrt(2)
    assert adv[:, 0].tolist() == pytest.approx([pair, -pair, lone], rel=1e-6)
    assert adv[2, 1].item() == pytest.approx(lone, rel=1e-6)


def test_rloo_leave_one_out_baseline():
    # group a: totals 1, 0, 2 -> baselines (0+2)/2 = 1, (1+2)/2 = 1.5, (1+0)/2 = 0.5 -> advantages 0, -1.5, 1.5
    # group b: a lone response keeps its total reward 4 (baseline 0, as in verl)
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [2.0, 0.0], [3.0, 1.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 1]])
    adv, returns = rloo_advantage(rewards, mask, ["a", "a", "a", "b"])
    close(adv, [[0.0, 0.0], [-1.5, 0.0], [1.5, 1.5], [4.0, 4.0]])
    assert torch.equal(adv, returns)


def test_reinforce_plus_plus_discounted_returns_whitened():
    # gamma 0.5. row 0: G2 = 1, G1 = 0.5, G0 = 0.25. row 1: the reward 5 after the response end (mask 0) does not
    # flow back: G1 = 2, G0 = 0 + 0.5 * 2 = 1.
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 5.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv, returns = reinforce_plus_plus_advantage(rewards, mask, gamma=0.5)
    assert returns[0].tolist() == pytest.approx([0.25, 0.5, 1.0])
    assert returns[1, :2].tolist() == pytest.approx([1.0, 2.0])
    # masked returns .25 .5 1 1 2: mean 4.75 / 5 = .95; deviations -.7 -.45 .05 .05 1.05; squares sum to 1.8;
    # unbiased variance 1.8 / 4 = .45
    std = math.sqrt(0.45 + 1e-8)
    assert adv[0].tolist() == pytest.approx([-0.7 / std, -0.45 / std, 0.05 / std], rel=1e-5)
    assert adv[1].tolist() == pytest.approx([0.05 / std, 1.05 / std, 0.0], rel=1e-5)


def test_reinforce_plus_plus_carries_the_return_across_masked_tokens():
    # gamma 1, score on the last token; row 0 has a masked token inside the response (a tool observation). verl
    # 0.9 writes return 0 there and passes the later return through: returns [1, 1, 0, 1, 1] and [1, 1, 1, 1, 1],
    # every response token's return is 1, so every advantage is 0 after whitening (resetting at the masked token
    # gave [0, 0, 1, 1, 1] and advantages [-1.76, -1.76, 0, 0.50, 0.50])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0, 1.0]])
    mask = torch.tensor([[1, 1, 0, 1, 1], [1, 1, 1, 1, 1]])
    adv, returns = reinforce_plus_plus_advantage(rewards, mask, gamma=1.0)
    close(returns, [[1.0, 1.0, 0.0, 1.0, 1.0], [1.0] * 5])
    close(adv, [[0.0] * 5, [0.0] * 5])


def test_discounted_returns_skip_masked_tokens_without_discounting_or_adding_their_reward():
    # gamma .5; tokens 1 and 2 masked, holding a reward 7 that is not the policy's: G4 = 1, G3 = .5, the masked
    # tokens get 0 and pass .5 on unchanged, G0 = .25. Row 1: a reward 5 on the padding does not flow back.
    rewards = torch.tensor([[0.0, 7.0, 7.0, 0.0, 1.0], [0.0, 2.0, 5.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 0, 0, 1, 1], [1, 1, 0, 0, 0]])
    close(discounted_returns(rewards, mask, gamma=0.5), [[0.25, 0.0, 0.0, 0.5, 1.0], [1.0, 2.0, 0.0, 0.0, 0.0]])


def test_reinforce_plus_plus_gives_every_turn_of_a_rewarded_multi_turn_response_a_positive_advantage():
    # two assistant turns separated by a tool observation (mask 0) inside each response, padding after; the score
    # sits on the last sampled token: row 0 succeeds, row 1 fails. Returns (gamma 1): row 0 1 on all 5 sampled
    # tokens, row 1 0: whitened over the 10 tokens, mean .5, unbiased std sqrt(10 * .25 / 9)
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 1, 0], [1, 1, 0, 0, 1, 1, 1, 0]])
    rewards = torch.zeros(2, 8)
    rewards[0, 6] = 1.0
    ctx = _ctx("reinforce_plus_plus")
    batch = Batch({"token_level_rewards": rewards, "response_mask": mask}, {"uid": ["a", "b"]})
    adv = compute_advantage(ctx, batch)[0]["advantages"]
    step = 0.5 / math.sqrt(10 * 0.25 / 9 + 1e-8)
    close(adv, [[step, step, 0, 0, step, step, step, 0], [-step, -step, 0, 0, -step, -step, -step, 0]])
    assert (adv[0, :2] > 0).all()  # the first turn of the successful response is reinforced too


def test_reinforce_plus_plus_baseline_group_mean_then_whitened():
    # totals: group a 1, 3 (mean 2) -> -1, 1; group b lone 2 -> 2 (baseline 0).
    # tokens (row 0 has 2, rows 1 and 2 one each): -1 -1 1 2 -> mean .25; deviations -1.25 -1.25 .75 1.75;
    # squares 1.5625 + 1.5625 + .5625 + 3.0625 = 6.75; unbiased variance 6.75 / 3 = 2.25, std 1.5
    rewards = torch.tensor([[0.0, 1.0], [3.0, 0.0], [2.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 0]])
    adv, returns = reinforce_plus_plus_baseline_advantage(rewards, mask, ["a", "a", "b"])
    close(adv, [[-1.25 / 1.5, -1.25 / 1.5], [0.75 / 1.5, 0.0], [1.75 / 1.5, 0.0]])
    assert torch.equal(adv, returns)


def test_gae_hand_computed():
    # gamma .9, lam .8 (gamma * lam = .72).
    # row 0, V = .2 .4 .6, r = 0 0 1:
    #   t2: delta = 1 - .6 = .4                  A2 = .4
    #   t1: delta = .9 * .6 - .4 = .14           A1 = .14 + .72 * .4 = .428
    #   t0: delta = .9 * .4 - .2 = .16           A0 = .16 + .72 * .428 = .46816
    # row 1, V = .1 .3 (9 after the end, ignored), r = 0 .5:
    #   t1: delta = .5 - .3 = .2                 A1 = .2
    #   t0: delta = .9 * .3 - .1 = .17           A0 = .17 + .72 * .2 = .314
    values = torch.tensor([[0.2, 0.4, 0.6], [0.1, 0.3, 9.0]])
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.5, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv, returns = gae_advantage(rewards, values, mask, gamma=0.9, lam=0.8)
    raw = [[0.46816, 0.428, 0.4], [0.314, 0.2]]
    assert returns[0].tolist() == pytest.approx([0.46816 + 0.2, 0.428 + 0.4, 0.4 + 0.6], rel=1e-6)
    assert returns[1].tolist() == pytest.approx([0.314 + 0.1, 0.2 + 0.3, 0.0], rel=1e-6)
    flat = torch.tensor(raw[0] + raw[1], dtype=torch.float64)
    mean, std = flat.mean().item(), flat.std().item()  # unbiased, over the 5 response tokens
    assert adv[0].tolist() == pytest.approx([(a - mean) / std for a in raw[0]], rel=1e-5)
    assert adv[1].tolist() == pytest.approx([(a - mean) / std for a in raw[1]] + [0.0], rel=1e-5)


def test_gae_skips_a_masked_token_inside_the_response():
    # gamma = lam = 1, V = 1 2 3, r = 0 0 1, middle token masked (e.g. a tool observation):
    #   t2: delta = 1 - 3 = -2, A2 = -2;  t1 skipped (carries V = 3, A = -2);  t0: delta = 3 - 1 = 2, A0 = 2 - 2 = 0
    values, rewards = torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[0.0, 0.0, 1.0]])
    _, returns = gae_advantage(rewards, values, torch.tensor([[1, 0, 1]]), gamma=1.0, lam=1.0)
    close(returns, [[0.0 + 1.0, 0.0, -2.0 + 3.0]])


def test_whitening_uses_the_reduced_statistics():
    # a reduce_sum that adds a second shard holding the value 3 (one token): global tokens 1 2 3 -> mean 2, std 1
    def with_other_shard(partial: torch.Tensor) -> torch.Tensor:
        other = {2: torch.tensor([1.0, 3.0]), 1: torch.tensor([(3.0 - 2.0) ** 2])}[partial.numel()]
        return partial + other.double()

    out = masked_whiten(torch.tensor([[1.0, 2.0]]), torch.ones(1, 2), with_other_shard)
    close(out, [[-1.0, 0.0]])


def _ctx(estimator: str, **algorithm) -> SimpleNamespace:
    cfg = Cfg(
        {
            "algorithm": {
                "adv_estimator": estimator,
                "norm_adv_by_std_in_grpo": True,
                "gamma": 1.0,
                "lam": 1.0,
                **algorithm,
            },
            "actor_rollout_ref": {"actor": {"mis_ratio_low": None, "mis_ratio_high": None}},
        }
    )
    return node_context(cfg)


def _batch() -> Batch:
    return Batch(
        {
            "token_level_rewards": torch.tensor([[0.0, 1.0], [0.0, 0.0], [2.0, 0.0], [0.0, 4.0]]),
            "response_mask": torch.tensor([[1, 1], [1, 0], [1, 1], [1, 1]]),
            "values": torch.tensor([[0.5, 0.5], [0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]),
            "reward_baselines": torch.tensor([0.5, 0.5, 3.0, 3.0]),
        },  # remax's: per prompt, a score
        {"uid": ["a", "a", "b", "b"]},
    )


@pytest.mark.parametrize("name", choices_of("algorithm.adv_estimator"))
def test_advantage_node_runs_every_estimator(name):
    batch, metrics = compute_advantage(_ctx(name), _batch())
    mask = batch["response_mask"].bool()
    assert batch["advantages"].shape == (4, 2) and torch.isfinite(batch["advantages"]).all()
    valid = batch["advantages"][mask]
    assert metrics["critic/advantages/mean"] == pytest.approx(valid.mean().item(), abs=1e-6)
    assert metrics["critic/advantages/max"] == pytest.approx(valid.max().item())
    assert metrics["critic/returns/min"] == pytest.approx(batch["returns"][mask].min().item())
    if name in ("reinforce_plus_plus", "reinforce_plus_plus_baseline", "gae"):  # whitened over the batch
        assert valid.mean().item() == pytest.approx(0.0, abs=1e-6)
    assert ("critic/vf_explained_var" in metrics) == (name == "gae")


def test_node_dispatch_matches_the_estimators():
    batch = _batch()
    rloo, _ = rloo_advantage(batch["token_level_rewards"], batch["response_mask"], batch["uid"])
    assert torch.equal(compute_advantage(_ctx("rloo"), _batch())[0]["advantages"], rloo)
    gae, _ = gae_advantage(batch["token_level_rewards"], batch["values"], batch["response_mask"], 0.5, 0.25)
    node = compute_advantage(_ctx("gae", gamma=0.5, lam=0.25), _batch())[0]["advantages"]
    assert torch.equal(node, gae)


def _preflight_error(*overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        preflight(Cfg(compose(["actor_rollout_ref.rollout.n=2", *overrides])))  # a group: GRPO trains
    return info.value


def test_unknown_estimator_lists_the_valid_ones():
    error = _preflight_error("algorithm.adv_estimator=ppo2")
    assert error.key == "algorithm.adv_estimator"
    assert all(name in str(error) for name in ADV_ESTIMATORS.names())


def test_gae_without_a_critic_node_is_a_preflight_error():
    error = _preflight_error("algorithm.adv_estimator=gae")  # the default graph (grpo) has no critic
    assert error.key == "algorithm.adv_estimator" and "role critic" in str(error)


@pytest.mark.parametrize("graph", ["dag=ppo", "dag.custom_pipeline_fn=tests.algo.test_advantage:graph_with_critic"])
def test_gae_with_a_critic_node_passes_the_estimator_check(graph):
    error = _preflight_error("algorithm.adv_estimator=gae", graph)
    assert error.key == "actor_rollout_ref.model.path"  # the next check: the estimator was accepted


def graph_with_critic() -> list[dict]:
    return [{"id": "values", "role": "critic", "fn": "dagrl.nodes.rollout:generate", "deps": []}]


@pytest.mark.parametrize(
    "override,key",
    [
        ("algorithm.gamma=1.5", "algorithm.gamma"),
        ("algorithm.lam=-0.1", "algorithm.lam"),
        ("actor_rollout_ref.actor.loss_scale_factor=0", "actor_rollout_ref.actor.loss_scale_factor"),
        ("algorithm.kl_ctrl.kl_coef=-1", "algorithm.kl_ctrl.kl_coef"),
    ],
)
def test_algorithm_keys_are_checked(override, key):
    assert _preflight_error(override).key == key


def test_adaptive_kl_controller_needs_a_positive_horizon():
    error = _preflight_error("algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.horizon=0")
    assert error.key == "algorithm.kl_ctrl.horizon"


@pytest.mark.parametrize(
    "overrides,says",
    [
        (("algorithm.adv_estimator=grpo",), "each advantage would be the raw score / (1 + 1e-6)"),
        (("algorithm.adv_estimator=rloo",), "each would keep its raw reward as its advantage"),
        (("algorithm.adv_estimator=reinforce_plus_plus_baseline",), "keep its raw reward before whitening"),
        (
            ("algorithm.adv_estimator=reinforce_plus_plus", "dag=dapo", "algorithm.filter_groups.enable=true"),
            "no group would ever be kept",
        ),
    ],
)
def test_groups_of_one_are_refused_with_what_each_would_do(overrides, says):
    """A group estimator's lone response keeps its score (grpo: over 1 + epsilon), as the estimators above compute
    it: the advantages are not 0, the group baseline is what is lost."""
    with pytest.raises(ConfigError) as info:
        preflight(Cfg(compose(["actor_rollout_ref.rollout.n=1", *overrides])))
    first = str(info.value).splitlines()[0]
    assert info.value.key == "actor_rollout_ref.rollout.n" and says in first and "2 or more" in first
    assert "every advantage would be 0" not in first


def test_reinforce_plus_plus_needs_no_group():
    with pytest.raises(ConfigError) as info:
        preflight(Cfg(compose(["actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=reinforce_plus_plus"])))
    assert info.value.key == "actor_rollout_ref.model.path"  # the next check: no model given
