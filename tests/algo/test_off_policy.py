"""Off-policy correction against hand-computed values: AReaL's decoupled PPO (ratio and clip against pi_prox, each
token's loss times pi_prox/pi_behav, masked above the cap), verl-style sequence masking by the geometric-mean
ratio, applied before the advantage as verl's trainer applies it, their metrics, and the pre-flight checks of
their keys."""

import math
from types import SimpleNamespace

import pytest
import torch

from dagrl.algo.off_policy import OFF_POLICY_MODES, behav_imp_weight, sequence_keep, sequence_ratio
from dagrl.algo.policy_loss import PolicyLossSpec, actor_loss
from dagrl.config.derived import skips_old_log_prob
from dagrl.config.errors import ConfigError
from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.config.schema.check import choices_of
from dagrl.config.validate import preflight
from dagrl.data.batch import Batch
from dagrl.nodes.actor import update_actor
from dagrl.nodes.advantage import compute_advantage
from dagrl.nodes.critic import update_critic
from tests.helpers import node_context

LN = math.log


def _decoupled_batch():
    """One response of 3 tokens: r = pi_theta/pi_prox = [1.1, 1.5, 0.9], w = pi_prox/pi_behav = [2, 0.5, 8],
    A = [1, 1, -1], token-mean weights 1/3."""
    old = torch.tensor([[-1.0, -2.0, -0.5]])
    log_prob = (old + torch.tensor([[LN(1.1), LN(1.5), LN(0.9)]])).requires_grad_(True)
    batch = Batch(
        {
            "token_weights": torch.full((1, 3), 1 / 3),
            "advantages": torch.tensor([[1.0, 1.0, -1.0]]),
            "old_log_probs": old,
            "rollout_log_probs": old - torch.tensor([[LN(2.0), LN(0.5), LN(8.0)]]),
            "response_mask": torch.ones(1, 3),
        }
    )
    return batch, log_prob


@pytest.mark.parametrize(
    "cap,loss,grad",
    [
        # PPO terms against pi_prox (eps 0.2): -1.1 (in range), max(-1.5, -1.2) = -1.2 (clipped: no gradient),
        # A < 0: max(0.9, 0.9) = 0.9 (in range). Times w: cap 5 masks token 2 (w = 8 > 5), which stays in the
        # denominator 3: (-2.2 - 0.6 + 0) / 3. d/dlog_prob of an unclipped token: -A r w / 3.
        (5.0, (-2.2 - 0.6) / 3, [-1.1 * 2 / 3, 0.0, 0.0]),
        (None, (-2.2 - 0.6 + 7.2) / 3, [-1.1 * 2 / 3, 0.0, 0.9 * 8 / 3]),  # no cap: w = 8 applies
        (10.0, (-2.2 - 0.6 + 7.2) / 3, [-1.1 * 2 / 3, 0.0, 0.9 * 8 / 3]),  # 8 <= 10: kept
    ],
)
def test_decoupled_loss_and_gradient_match_the_formula(cap, loss, grad):
    batch, log_prob = _decoupled_batch()
    value, metrics = actor_loss(batch, log_prob, None, PolicyLossSpec(off_policy="decoupled", behav_imp_weight_cap=cap))
    assert value.item() == pytest.approx(loss, rel=1e-5)
    assert metrics["actor/pg_loss"].item() == pytest.approx(loss, rel=1e-5)
    value.backward()
    assert log_prob.grad[0].tolist() == pytest.approx(grad, rel=1e-5, abs=1e-7)
    # the clip fraction is against pi_prox: only token 1 (r = 1.5) is clipped
    assert metrics["actor/pg_clipfrac"].item() == pytest.approx(1 / 3, rel=1e-6)


def test_behaviour_weight_is_masked_above_the_cap_and_carries_no_gradient():
    prox = torch.tensor([LN(2.0), LN(0.5), LN(8.0), 0.0], requires_grad=True)
    behav = torch.zeros(4)
    weight = behav_imp_weight(prox, behav, cap=5.0)
    assert weight.tolist() == pytest.approx([2.0, 0.5, 0.0, 1.0], rel=1e-6)  # masked, not truncated to 5
    assert not weight.requires_grad


@pytest.mark.parametrize("loss_mode", ["vanilla", "gspo", "cispo"])
def test_decoupled_with_proximal_equal_to_behaviour_is_exactly_the_plain_loss(loss_mode):
    generator = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 5, generator=generator) - 0.1
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.float32)
    batch = Batch(
        {
            "token_weights": mask / mask.sum(),
            "advantages": torch.randn(3, 5, generator=generator),
            "old_log_probs": old,
            "rollout_log_probs": old.clone(),
            "response_mask": mask,
        }
    )
    results = []
    for off_policy in ("none", "decoupled"):
        log_prob = (old + 0.3 * torch.randn(3, 5, generator=torch.Generator().manual_seed(1))).requires_grad_(True)
        loss, _ = actor_loss(batch, log_prob, None, PolicyLossSpec(loss_mode=loss_mode, off_policy=off_policy))
        loss.backward()
        results.append((loss.detach(), log_prob.grad))
    (plain, plain_grad), (decoupled, decoupled_grad) = results
    assert torch.equal(plain, decoupled) and torch.equal(plain_grad, decoupled_grad)  # w = exp(0) = 1 exactly


def _masking_batch():
    """Four responses of up to 3 tokens; log(pi_prox/pi_behav) per token (padding holds a large gap, which must not
    count): seq0 [0.1, 0.3] -> mean 0.2, ratio e^0.2 = 1.2214; seq1 [-0.5, -0.1, -0.3] -> e^-0.3 = 0.7408;
    seq2 [0.6] -> e^0.6 = 1.8221; seq3 has no response token -> ratio 1."""
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [0, 0, 0]], dtype=torch.float32)
    gap = torch.tensor([[0.1, 0.3, 5.0], [-0.5, -0.1, -0.3], [0.6, 5.0, 5.0], [5.0, 5.0, 5.0]])
    old = torch.full((4, 3), -1.0)
    return old, old - gap, mask


def test_sequence_ratio_is_the_geometric_mean_over_response_tokens():
    old, behav, mask = _masking_batch()
    ratio = sequence_ratio(old, behav, mask)
    assert ratio.tolist() == pytest.approx([math.exp(0.2), math.exp(-0.3), math.exp(0.6), 1.0], rel=1e-6)


@pytest.mark.parametrize(
    "low,high,kept",
    [
        (0.8, 1.5, [True, False, False, True]),  # 0.7408 < 0.8, 1.8221 > 1.5
        (0.7, 2.0, [True, True, True, True]),
        (None, 1.5, [True, True, False, True]),  # an unset bound is no bound
        (0.8, None, [True, False, True, True]),
    ],
)
def test_sequence_masking_keeps_exactly_the_sequences_in_the_band(low, high, kept):
    assert sequence_keep(*_masking_batch(), low, high).tolist() == kept


class _RecordingEngine:
    """Stands in for the actor or critic engine: records each mini-batch; an actor's loss is evaluated on it whole
    (at ratio 1)."""

    def __init__(self, evaluate: bool = True) -> None:
        self.mini_batches: list[Batch] = []
        self.evaluate = evaluate

    def train_step(self, batch: Batch, loss_fn, micro_batch_size: int, **_) -> dict[str, float]:
        self.mini_batches.append(batch)
        if not self.evaluate:
            return {}
        _, metrics = loss_fn(batch, batch["old_log_probs"].clone(), None)
        return {name: float(value) for name, value in metrics.items()}


def _ctx(*overrides: str):
    cfg = Cfg(
        compose(
            [
                "dag=ppo",
                "actor_rollout_ref.rollout.n=1",
                "data.train_batch_size=4",
                "critic.ppo_mini_batch_size=4",
                "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                *overrides,
            ]
        )
    )
    return node_context(
        cfg, response_length=3, actor=_RecordingEngine(), critic=_RecordingEngine(evaluate=False), step=1
    )


def _update(batch: Batch, *overrides: str) -> tuple[_RecordingEngine, dict[str, float]]:
    ctx = _ctx(*overrides)
    _, metrics = update_actor(ctx, batch)
    return ctx.actor, metrics


BAND = ("actor_rollout_ref.actor.mis_ratio_low=0.7", "actor_rollout_ref.actor.mis_ratio_high=1.5")


def _masked_step(agg: str) -> tuple[SimpleNamespace, Batch, dict[str, float]]:
    """The PPO graph's tail on `_masking_batch` with the band [0.7, 1.5]: seq0 (1.22) and seq1 (0.74) are kept,
    seq2 (1.82) is rejected, seq3 has no response token. Scores on the last token, gamma 1: seq0 [0, 1], seq1
    [0, 0, 0], seq2 [1]."""
    old, behav, mask = _masking_batch()
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    batch = Batch(
        {
            "old_log_probs": old,
            "rollout_log_probs": behav,
            "response_mask": mask,
            "token_level_rewards": rewards,
            "values": torch.zeros(4, 3),
        },
        {"uid": ["a", "b", "c", "d"]},
    )
    ctx = _ctx(
        "algorithm.adv_estimator=reinforce_plus_plus",
        f"actor_rollout_ref.actor.loss_agg_mode={agg}",
        f"critic.loss_agg_mode={agg}",
        *BAND,
    )
    batch, metrics = compute_advantage(ctx, batch)
    update_critic(ctx, batch)
    metrics.update(update_actor(ctx, batch)[1])
    return ctx, batch, metrics


def test_sequence_masking_applies_before_the_advantage_as_verls_trainer():
    """verl rewrites response_mask with the rejection before compute_advantage: the whitening statistics are over
    the kept tokens only. Returns 1 1 | 0 0 0: mean .4, squared deviations .36 x 2 + .16 x 3 = 1.2, unbiased
    variance .3 (the whole batch, seq2's 1 included, would give mean .5)."""
    _, batch, metrics = _masked_step("token-mean")
    std = math.sqrt(0.3 + 1e-8)
    torch.testing.assert_close(
        batch["advantages"], torch.tensor([[0.6 / std, 0.6 / std, 0.0], [-0.4 / std] * 3, [0.0] * 3, [0.0] * 3])
    )
    torch.testing.assert_close(batch["loss_mask"], torch.tensor([[1.0, 1.0, 0.0], [1.0] * 3, [0.0] * 3, [0.0] * 3]))
    assert metrics["critic/advantages/mean"] == pytest.approx(0.0, abs=1e-6)  # over the kept tokens
    assert metrics["actor/mis_masked_fraction"] == pytest.approx(1 / 3)  # 1 of the 3 sequences with tokens


@pytest.mark.parametrize(
    "agg,kept_weight",
    [
        ("token-mean", 1 / 5),  # the 5 kept tokens: the rejected sequence's token leaves the token count
        ("seq-mean-token-sum", 1 / 3),  # the 3 sequences with tokens: verl divides by the nominal sequence count
    ],
)
def test_critic_and_actor_train_on_the_kept_sequences_with_verls_denominators(agg, kept_weight):
    ctx, _, metrics = _masked_step(agg)
    kept = torch.tensor([[1.0, 1.0, 0.0], [1.0] * 3, [0.0] * 3, [0.0] * 3])
    for engine in (ctx.critic, ctx.actor):
        (seen,) = engine.mini_batches
        torch.testing.assert_close(seen["token_weights"], kept * kept_weight)
        torch.testing.assert_close(seen["token_mean_weights"], kept / 5)
    # ratio 1: each kept token's term is -A, equally weighted; whitened over the kept tokens, the A sum to 0
    assert metrics["actor/pg_loss"] == pytest.approx(0.0, abs=1e-6)


def test_actor_applies_sequence_masking_itself_when_no_advantage_node_did():
    old, behav, mask = _masking_batch()
    batch = Batch(
        {"old_log_probs": old, "rollout_log_probs": behav, "response_mask": mask, "advantages": torch.ones(4, 3)}
    )
    engine, metrics = _update(
        batch,
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum",
        "actor_rollout_ref.actor.mis_ratio_low=0.8",
        "actor_rollout_ref.actor.mis_ratio_high=1.5",
    )
    (seen,) = engine.mini_batches
    # only seq0 is kept (0.7408 < 0.8, 1.8221 > 1.5); 3 sequences have response tokens
    torch.testing.assert_close(seen["token_weights"], torch.tensor([[1 / 3, 1 / 3, 0.0], *[[0.0] * 3] * 3]))
    assert metrics["actor/mis_masked_fraction"] == pytest.approx(2 / 3)
    assert metrics["actor/pg_loss"] == pytest.approx(-2 / 3)  # ratio 1, A = 1: seq0's token sum -2 over 3


def test_decoupled_metrics_follow_areal_denominators():
    """w per token: seq0 [2, 0.5, 8], seq1 [1, pad]; cap 5 masks the 8. Uncapped tokens 2, 0.5, 1: mean 3.5 / 3,
    behav_approx_kl (ln 2 - ln 2 + 0) / 3 = 0; capped 1 of the 4 loss tokens."""
    old = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, 0.0, 0.0]])
    behav = old - torch.tensor([[LN(2.0), LN(0.5), LN(8.0)], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    batch = Batch(
        {
            "old_log_probs": old,
            "rollout_log_probs": behav,
            "response_mask": mask,
            "advantages": torch.tensor([[1.0, 1.0, -1.0], [1.0, 0.0, 0.0]]),
        }
    )
    engine, metrics = _update(
        batch,
        "data.train_batch_size=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.policy_loss.off_policy=decoupled",
    )
    assert metrics["actor/behav_imp_weight/mean"] == pytest.approx(3.5 / 3, rel=1e-6)
    assert metrics["actor/behav_approx_kl"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["actor/behav_imp_weight_capped_fraction"] == pytest.approx(0.25)
    assert "actor/mis_masked_fraction" not in metrics
    # at ratio 1 each PPO term is -A: (-1 * 2 - 1 * 0.5 + 0 - 1 * 1) / 4 tokens
    assert metrics["actor/pg_loss"] == pytest.approx(-3.5 / 4, rel=1e-6)


def test_off_policy_correction_keeps_the_old_log_prob_pass():
    one_step = [
        "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "async_training.partial_rollout=true",
    ]
    assert skips_old_log_prob(Cfg(compose(one_step)))
    for extra in (
        "actor_rollout_ref.actor.policy_loss.off_policy=decoupled",
        "actor_rollout_ref.actor.mis_ratio_high=2",
    ):
        assert not skips_old_log_prob(Cfg(compose([*one_step, extra])))


def test_off_policy_names_match_preflight_choices():
    assert choices_of("actor_rollout_ref.actor.policy_loss.off_policy") == OFF_POLICY_MODES


DECOUPLED = "actor_rollout_ref.actor.policy_loss.off_policy=decoupled"
LOG_PROBS = "actor_rollout_ref.rollout.calculate_log_probs=true"
ACTOR = "actor_rollout_ref.actor"


def _preflight_error(*overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        preflight(Cfg(compose(["actor_rollout_ref.rollout.n=2", *overrides])))
    return info.value


@pytest.mark.parametrize(
    "overrides,key,fix",
    [
        (
            (f"{ACTOR}.policy_loss.off_policy=areal",),
            f"{ACTOR}.policy_loss.off_policy",
            "is not one of: none, decoupled",
        ),
        ((DECOUPLED,), f"{ACTOR}.policy_loss.off_policy", "set actor_rollout_ref.rollout.calculate_log_probs=true"),
        (
            (DECOUPLED, LOG_PROBS, f"{ACTOR}.policy_loss.behav_imp_weight_cap=1"),
            f"{ACTOR}.policy_loss.behav_imp_weight_cap",
            "must be > 1",
        ),
        ((DECOUPLED, LOG_PROBS, f"{ACTOR}.tis_imp_ratio_cap=2"), f"{ACTOR}.tis_imp_ratio_cap", "tis_imp_ratio_cap=-1"),
        (
            (f"{ACTOR}.mis_ratio_high=2",),
            f"{ACTOR}.mis_ratio_high",
            "set actor_rollout_ref.rollout.calculate_log_probs",
        ),
        ((LOG_PROBS, f"{ACTOR}.mis_ratio_low=1.2"), f"{ACTOR}.mis_ratio_low", "must be in (0, 1)"),
        ((LOG_PROBS, f"{ACTOR}.mis_ratio_low=-0.5"), f"{ACTOR}.mis_ratio_low", "must be in (0, 1)"),
        ((LOG_PROBS, f"{ACTOR}.mis_ratio_high=0.5"), f"{ACTOR}.mis_ratio_high", "must be > 1"),
    ],
)
def test_preflight_refuses_bad_off_policy_settings(overrides, key, fix):
    error = _preflight_error(*overrides)
    first = str(error).splitlines()[0]  # further lines: this config names no model or data either
    assert error.key == key and key in first and fix in first


@pytest.mark.parametrize(
    "overrides",
    [
        (DECOUPLED, "async_training.partial_rollout=true"),
        (DECOUPLED, LOG_PROBS, f"{ACTOR}.policy_loss.behav_imp_weight_cap=null"),
        (LOG_PROBS, f"{ACTOR}.mis_ratio_low=0.5", f"{ACTOR}.mis_ratio_high=2"),
    ],
)
def test_preflight_accepts_valid_off_policy_settings(overrides):
    assert _preflight_error(*overrides).key == "actor_rollout_ref.model.path"  # the next check: no model given
