"""KL estimators, the fixed/adaptive KL controller and KL-in-reward against hand-computed values."""

import math
from types import SimpleNamespace

import pytest
import torch

from dagrl.algo.kl import KLController, kl_penalty
from dagrl.config.tree import Cfg
from dagrl.data.batch import Batch
from dagrl.nodes.reward import apply_kl_in_reward
from tests.helpers import node_context


@pytest.mark.parametrize(
    "kind,expected",
    [
        ("k1", 0.5),
        ("kl", 0.5),
        ("abs", 0.5),
        ("k2", 0.125),
        ("mse", 0.125),
        ("k3", math.exp(-0.5) + 0.5 - 1.0),
        ("low_var_kl", math.exp(-0.5) + 0.5 - 1.0),
    ],
)
def test_kl_estimators(kind, expected):
    value = kl_penalty(torch.tensor([-1.0]), torch.tensor([-1.5]), kind)
    assert value.item() == pytest.approx(expected, rel=1e-6)


def test_kl_unknown_estimator_is_an_error():
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "k9")


def test_fixed_kl_controller_never_moves():
    fixed = KLController("fixed", kl_coef=0.1, target_kl=0.1, horizon=100)
    for kl in (5.0, 0.0, -3.0):
        fixed.update(kl, n_steps=10)
    assert fixed.value == 0.1


def test_adaptive_kl_controller_by_hand():
    ctrl = KLController("adaptive", kl_coef=0.1, target_kl=0.1, horizon=100)
    # KL 0.15: error 0.15 / 0.1 - 1 = 0.5, clipped to 0.2 -> coef * (1 + 0.2 * 10 / 100) = 0.1 * 1.02 = 0.102
    ctrl.update(current_kl=0.15, n_steps=10)
    assert ctrl.value == pytest.approx(0.102)
    # KL 0.09: error -0.1 (inside the clip) -> 0.102 * (1 - 0.1 * 10 / 100) = 0.102 * 0.99 = 0.10098
    ctrl.update(current_kl=0.09, n_steps=10)
    assert ctrl.value == pytest.approx(0.10098)
    # KL 0: error -1 clipped to -0.2 -> 0.10098 * (1 - 0.2 * 50 / 100) = 0.10098 * 0.9 = 0.090882
    ctrl.update(current_kl=0.0, n_steps=50)
    assert ctrl.value == pytest.approx(0.090882)
    restored = KLController("adaptive", kl_coef=1.0, target_kl=0.1, horizon=100)
    restored.load_state_dict(ctrl.state_dict())  # the coefficient survives a checkpoint
    assert restored.value == ctrl.value


def test_unknown_controller_type_is_an_error():
    with pytest.raises(ValueError, match="fixed or adaptive"):
        KLController("pid", 0.1, 0.1, 100)


def _kl_ctx(kind: str) -> SimpleNamespace:
    cfg = Cfg({"algorithm": {"use_kl_in_reward": True, "kl_penalty": "k1"}})
    return node_context(cfg, kl_ctrl=KLController(kind, kl_coef=0.1, target_kl=0.1, horizon=100))


def _kl_batch() -> Batch:
    return Batch(
        {
            "token_level_scores": torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]]),
            "response_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
            "old_log_probs": torch.full((2, 3), -1.0),
            "ref_log_prob": torch.tensor([[-1.5, -1.0, -0.5], [-2.0, -1.0, -9.0]]),
        }
    )


@pytest.mark.parametrize("kind,coef_after", [("fixed", 0.1), ("adaptive", 0.1004)])
def test_kl_in_reward_by_hand(kind, coef_after):
    # k1 = old - ref = [.5, 0, -.5], [1, 0, (8 after the end: masked to 0)]; beta 0.1:
    # rewards = scores - 0.1 * kl = [-.05, 0, 1.05], [-.1, 2, 0]
    # per-response mean KL: (.5 + 0 - .5) / 3 = 0 and (1 + 0) / 2 = .5 -> batch mean .25
    # adaptive: error .25 / .1 - 1 = 1.5 clipped to .2, n_steps = 2 responses -> .1 * (1 + .2 * 2 / 100) = .1004
    ctx = _kl_ctx(kind)
    batch, metrics = apply_kl_in_reward(ctx, _kl_batch())
    torch.testing.assert_close(batch["token_level_rewards"], torch.tensor([[-0.05, 0.0, 1.05], [-0.1, 2.0, 0.0]]))
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(0.25)
    assert metrics["actor/reward_kl_penalty_coeff"] == pytest.approx(0.1)  # the coefficient this step used
    assert metrics["critic/rewards/mean"] == pytest.approx((1.0 + 1.9) / 2)  # row sums -.05 + 1.05, -.1 + 2
    assert ctx.kl_ctrl.value == pytest.approx(coef_after)
