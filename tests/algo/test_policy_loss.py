"""Policy losses (vanilla, GSPO, CISPO) against hand-computed values, and loss aggregation: every loss_agg_mode
gives the same loss and gradient whether a mini-batch is computed whole or split into DP shards and
micro-batches, and equals the mode's global definition."""

import math

import pytest
import torch

from dagrl.algo.catalog import LOSS_AGGREGATIONS, POLICY_LOSSES
from dagrl.algo.policy_loss import (
    PolicyLossSpec,
    actor_loss,
    aggregation_counts,
    cispo_policy_loss,
    gspo_policy_loss,
    policy_loss,
    token_weights,
    vanilla_policy_loss,
)
from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.data.batch import Batch
from dagrl.nodes.actor import policy_loss_spec, update_actor
from tests.helpers import node_context


def test_vanilla_policy_loss_clip_and_dual_clip():
    old = torch.zeros(4)
    log_prob = torch.log(torch.tensor([1.5, 0.5, 1.1, 10.0]))
    adv = torch.tensor([1.0, 1.0, -2.0, -1.0])
    loss, terms = vanilla_policy_loss(log_prob, old, adv, torch.ones(4), PolicyLossSpec())
    # token 0: ratio 1.5, A>0 -> max(-1.5, -1.2) = -1.2 (clipped)
    # token 1: ratio 0.5, A>0 -> max(-0.5, -0.8) = -0.5
    # token 2: ratio 1.1, A<0 -> max(2.2, 2.2) = 2.2, min(6, 2.2) = 2.2
    # token 3: ratio 10, A<0 -> max(10, 1.2) = 10, dual clip min(3, 10) = 3
    assert loss.tolist() == pytest.approx([-1.2, -0.5, 2.2, 3.0], rel=1e-6)
    assert terms["actor/pg_clipfrac"].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert terms["actor/pg_clipfrac_lower"].tolist() == [0.0, 0.0, 0.0, 1.0]


def test_gspo_sequence_ratio_clip_and_gradient():
    # row 0: token ratios 1.2, 1.5 -> s = exp(mean(log 1.2, log 1.5)) = sqrt(1.8) = 1.341641; A = 1:
    #        max(-1.341641, -clip(s) = -1.2) = -1.2 on both tokens, clipped, so no gradient
    # row 1: token ratios 1.1, 0.9 -> s = sqrt(0.99) = 0.994987; A = 2: loss -1.989975 per token, unclipped;
    #        d loss / d log_prob_t = -A * s = -1.989975 (the sequence ratio times the token's score function)
    # row 2: one response token, ratio 0.5 (the masked second token's ratio 9 is ignored) -> s = 0.5; A = -1:
    #        max(0.5, clip(0.5) = 0.8) = 0.8, clipped: no gradient
    old = torch.zeros(3, 2)
    log_prob = torch.log(torch.tensor([[1.2, 1.5], [1.1, 0.9], [0.5, 9.0]])).requires_grad_()
    adv = torch.tensor([[1.0, 1.0], [2.0, 2.0], [-1.0, -1.0]])
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]])
    loss, terms = gspo_policy_loss(log_prob, old, adv, mask, PolicyLossSpec())
    s1 = math.sqrt(0.99)
    torch.testing.assert_close(loss[:, 0], torch.tensor([-1.2, -2 * s1, 0.8]))
    torch.testing.assert_close(loss[:2, 1], torch.tensor([-1.2, -2 * s1]))
    assert terms["actor/pg_clipfrac"][:, 0].tolist() == [1.0, 0.0, 1.0]
    (grad,) = torch.autograd.grad((loss * mask).sum(), log_prob)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0], [-2 * s1, -2 * s1], [0.0, 0.0]]))


def test_gspo_equals_vanilla_on_policy():
    # with old = current log-probs every ratio is 1: GSPO and PPO have the same loss and gradient
    log_prob = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    adv, mask = torch.tensor([[0.7, 0.7, 0.7]]), torch.ones(1, 3)
    gspo, _ = gspo_policy_loss(log_prob, log_prob.detach(), adv, mask, PolicyLossSpec())
    ppo, _ = vanilla_policy_loss(log_prob, log_prob.detach(), adv, mask, PolicyLossSpec())
    assert torch.equal(gspo, ppo)
    assert torch.equal(torch.autograd.grad(gspo.sum(), log_prob)[0], torch.autograd.grad(ppo.sum(), log_prob)[0])


def test_cispo_clipped_detached_weight_times_log_prob():
    # token 0: ratio 1.5 -> weight clip = 1.2, A = 1:    loss = -1.2 * 1 * log 1.5 = -0.486558, grad -1.2
    # token 1: ratio 0.5 -> weight 0.8, A = -2:          loss = -0.8 * -2 * log 0.5 = -1.109035, grad 1.6
    # token 2: ratio 1.1 -> weight 1.1 (inside), A = .5: loss = -1.1 * .5 * log 1.1 = -0.052421, grad -0.55
    old = torch.zeros(3)
    log_prob = torch.log(torch.tensor([1.5, 0.5, 1.1])).requires_grad_()
    adv = torch.tensor([1.0, -2.0, 0.5])
    loss, terms = cispo_policy_loss(log_prob, old, adv, torch.ones(3), PolicyLossSpec())
    torch.testing.assert_close(loss, torch.tensor([-1.2 * math.log(1.5), 1.6 * math.log(0.5), -0.55 * math.log(1.1)]))
    (grad,) = torch.autograd.grad(loss.sum(), log_prob)
    torch.testing.assert_close(grad, torch.tensor([-1.2, 1.6, -0.55]))  # clipped tokens keep their gradient
    assert terms["actor/pg_clipfrac"].tolist() == [1.0, 1.0, 0.0]
    assert terms["actor/ppo_kl"].tolist() == pytest.approx([-math.log(1.5), -math.log(0.5), -math.log(1.1)])


def test_token_weights_per_mode_by_hand():
    # this shard: rows of 3 and 1 tokens and an empty row; the whole mini-batch has 8 tokens in 4 non-empty rows
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    assert aggregation_counts(mask).tolist() == [4.0, 2.0]
    assert token_weights(mask, "token-mean", 8.0)[0].tolist() == [1 / 8] * 3 + [0.0]
    assert token_weights(mask, "seq-mean-token-sum", 8.0, 4.0)[1].tolist() == [1 / 4, 0.0, 0.0, 0.0]
    assert token_weights(mask, "seq-mean-token-mean", 8.0, 4.0)[0].tolist() == pytest.approx([1 / 12] * 3 + [0.0])
    norm = token_weights(mask, "seq-mean-token-sum-norm", 8.0, 4.0)  # L = the padded response length, 4
    assert norm[0].tolist() == [1 / 16] * 3 + [0.0]
    assert token_weights(mask, "seq-mean-token-sum-norm", 8.0, 4.0, loss_scale_factor=2)[1, 0] == 1 / 8
    assert token_weights(mask, "seq-mean-token-mean", 8.0, 4.0)[2].sum() == 0
    assert token_weights(mask, "token-sum", 8.0, 4.0).tolist() == mask.tolist()  # verl's agg_loss: the plain sum
    with pytest.raises(ValueError, match="valid: token-mean, token-sum"):
        token_weights(mask, "token_sum", 8.0, 4.0)


def _mini_batch(seed: int = 0) -> tuple[Batch, torch.Tensor, torch.Tensor]:
    """Six responses of 1-4 tokens and one empty one, random advantages, old and current log-probs."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([4, 1, 3, 0, 2, 4, 3])
    mask = (torch.arange(4).unsqueeze(0) < lengths.unsqueeze(1)).long()
    adv = torch.randn(7, 1, generator=generator).expand(7, 4).clone() * mask
    old = -torch.rand(7, 4, generator=generator) - 0.1
    log_prob = old + 0.3 * torch.randn(7, 4, generator=generator)  # ratios roughly 0.5 .. 2: some clipped
    ref = old - 0.05 * torch.rand(7, 4, generator=generator)
    batch = Batch({"response_mask": mask, "advantages": adv, "old_log_probs": old, "ref_log_prob": ref})
    return batch, log_prob, torch.rand(7, 4, generator=generator)


def _with_weights(batch: Batch, mode: str, counts: torch.Tensor, scale: float | None) -> Batch:
    tokens, sequences = counts.tolist()
    out = batch.select(range(len(batch)))
    out["token_weights"] = token_weights(batch["response_mask"], mode, tokens, sequences, scale)
    out["token_mean_weights"] = token_weights(batch["response_mask"], "token-mean", tokens)
    return out


def _global_definition(per_token: torch.Tensor, mask: torch.Tensor, mode: str, scale: float) -> float:
    """The aggregate computed directly from its definition on the unsplit mini-batch."""
    mask = mask.double()
    per_token = per_token.double() * mask
    lengths = mask.sum(-1)
    nonempty = lengths > 0
    if mode == "token-mean":
        return (per_token.sum() / mask.sum()).item()
    if mode == "token-sum":
        return per_token.sum().item()
    sums = per_token.sum(-1)[nonempty]
    if mode == "seq-mean-token-sum":
        return sums.mean().item()
    if mode == "seq-mean-token-mean":
        return (sums / lengths[nonempty]).mean().item()
    return (sums / scale).mean().item()


# clip_cov and kl_cov pick tokens by statistics of the micro-batch they are given, as verl's do
@pytest.mark.parametrize("loss_mode", [e.name for e in POLICY_LOSSES if e.name not in ("clip_cov", "kl_cov")])
@pytest.mark.parametrize("mode", LOSS_AGGREGATIONS.names())
def test_split_mini_batch_gives_the_global_loss_and_gradient(loss_mode, mode):
    batch, log_prob, entropy = _mini_batch()
    scale = 3.0 if mode == "seq-mean-token-sum-norm" else None
    spec = PolicyLossSpec(
        loss_mode=loss_mode,
        loss_agg_mode=mode,
        entropy_coeff=0.01,
        use_kl_loss=True,
        kl_loss_coef=0.1,
        loss_scale_factor=scale,
    )
    counts = aggregation_counts(batch["response_mask"])
    assert counts.tolist() == [17.0, 6.0]  # the empty response is not a sequence of the seq-mean modes

    logp = log_prob.clone().requires_grad_()
    whole, whole_metrics = actor_loss(_with_weights(batch, mode, counts, scale), logp, entropy, spec)
    (grad_whole,) = torch.autograd.grad(whole, logp)

    # two DP shards (rows 0-3 and 4-6); each computes weights from the summed counts, then micro-batches of 2
    shards = [batch.select(range(4)), batch.select(range(4, 7))]
    global_counts = sum(aggregation_counts(shard["response_mask"]) for shard in shards)
    logp = log_prob.clone().requires_grad_()
    total, metric_sums, offset = 0.0, {}, 0
    for shard in shards:
        weighted = _with_weights(shard, mode, global_counts, scale)
        for start in range(0, len(weighted), 2):
            rows = slice(offset + start, offset + min(start + 2, len(weighted)))
            part, metrics = actor_loss(weighted.slice(start, start + 2), logp[rows], entropy[rows], spec)
            total = total + part
            for name, value in metrics.items():
                metric_sums[name] = metric_sums.get(name, 0.0) + value
        offset += len(shard)
    (grad_split,) = torch.autograd.grad(total, logp)
    assert total.item() == pytest.approx(whole.item(), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(grad_split, grad_whole)
    for name, value in whole_metrics.items():
        assert metric_sums[name].item() == pytest.approx(value.item(), rel=1e-5, abs=1e-7), name

    # and the whole mini-batch's pg_loss is the mode's definition over the per-token losses
    per_token, terms = policy_loss(spec, log_prob, batch["old_log_probs"], batch["advantages"], batch["response_mask"])
    expected = _global_definition(per_token, batch["response_mask"], mode, scale or 4.0)
    assert whole_metrics["actor/pg_loss"].item() == pytest.approx(expected, rel=1e-5)
    # clip fractions and ppo_kl are global token means in every mode
    for name in set(terms) & {"actor/pg_clipfrac", "actor/ppo_kl"}:
        expected = _global_definition(terms[name], batch["response_mask"], "token-mean", 1.0)
        assert whole_metrics[name].item() == pytest.approx(expected, rel=1e-5, abs=1e-7)


def test_actor_loss_differs_from_a_mean_of_micro_batch_means():
    batch, log_prob, _ = _mini_batch(seed=1)
    counts = aggregation_counts(batch["response_mask"])
    spec = PolicyLossSpec(clip_ratio_low=10, clip_ratio_high=10)
    whole, _ = actor_loss(_with_weights(batch, "token-mean", counts, None), log_prob, None, spec)
    mean_of_means = torch.stack(
        [
            actor_loss(
                _with_weights(part, "token-mean", aggregation_counts(part["response_mask"]), None),
                log_prob[i : i + 2],
                None,
                spec,
            )[0]
            for i, part in zip(range(0, 8, 2), batch.split(2))
        ]
    ).mean()
    assert not math.isclose(whole.item(), mean_of_means.item(), rel_tol=1e-3)


def test_actor_loss_kl_term():
    mask = torch.ones(1, 2)
    batch = Batch(
        {
            "response_mask": mask,
            "advantages": torch.zeros(1, 2),
            "old_log_probs": torch.zeros(1, 2),
            "ref_log_prob": torch.tensor([[-0.5, -0.5]]),
            "token_weights": mask / 2,
        }
    )
    spec = PolicyLossSpec(use_kl_loss=True, kl_loss_coef=0.1, kl_loss_type="k1")
    loss, metrics = actor_loss(batch, torch.zeros(1, 2), None, spec)
    assert metrics["actor/kl_loss"].item() == pytest.approx(0.5)
    assert loss.item() == pytest.approx(0.05)


def test_unknown_loss_mode_is_an_error():
    batch, log_prob, _ = _mini_batch()
    with pytest.raises(ValueError, match="not one of: vanilla, gspo, cispo"):
        policy_loss(
            PolicyLossSpec(loss_mode="dro"),
            log_prob,
            batch["old_log_probs"],
            batch["advantages"],
            batch["response_mask"],
        )


class _RecordingEngine:
    """Stands in for the actor engine: records each mini-batch and evaluates the loss on it whole."""

    def __init__(self) -> None:
        self.mini_batches: list[Batch] = []
        self.with_entropy: list[bool] = []

    def train_step(
        self,
        batch: Batch,
        loss_fn,
        micro_batch_size: int,
        temperature: float,
        max_token_len: int | None = None,
        with_entropy: bool = True,
    ) -> dict[str, float]:
        self.mini_batches.append(batch)
        self.with_entropy.append(with_entropy)
        entropy = torch.ones_like(batch["old_log_probs"]) if with_entropy else None
        _, metrics = loss_fn(batch, batch["old_log_probs"] + 0.1, entropy)
        return {name: float(value) for name, value in metrics.items()}


@pytest.mark.parametrize("loss_mode,mode", [("gspo", "seq-mean-token-mean"), ("cispo", "seq-mean-token-sum-norm")])
def test_actor_node_weights_each_mini_batch_by_the_configured_mode(loss_mode, mode):
    cfg = Cfg(
        compose(
            [
                f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}",
                f"actor_rollout_ref.actor.loss_agg_mode={mode}",
                "actor_rollout_ref.rollout.n=1",
                "data.train_batch_size=7",
                "actor_rollout_ref.actor.ppo_mini_batch_size=7",
            ]
        )
    )
    engine = _RecordingEngine()
    ctx = node_context(cfg, response_length=4, actor=engine, step=1)
    spec = policy_loss_spec(ctx)
    assert (spec.loss_mode, spec.loss_agg_mode, spec.loss_scale_factor) == (loss_mode, mode, 4)
    batch, _, _ = _mini_batch()
    _, metrics = update_actor(ctx, batch)
    (seen,) = engine.mini_batches
    weights, mask = seen["token_weights"], batch["response_mask"]
    # 6 non-empty responses: each response's weights sum to 1/6 (token-mean) or L_i / (4 * 6) (sum-norm)
    per_response = weights.sum(-1)[mask.sum(-1) > 0]
    expected = 1 / 6 if mode == "seq-mean-token-mean" else mask.sum(-1)[mask.sum(-1) > 0] / 24
    torch.testing.assert_close(per_response, torch.as_tensor(expected, dtype=torch.float32).expand(6))
    assert seen["token_mean_weights"].sum().item() == pytest.approx(1.0)
    # ratio exp(0.1) everywhere: ppo_kl is the token mean of -0.1
    assert metrics["actor/ppo_kl"] == pytest.approx(-0.1, rel=1e-5)


@pytest.mark.parametrize(
    "overrides,with_entropy",
    [
        ([], False),  # entropy_coeff 0: the old-log-prob pass reports it
        (["actor_rollout_ref.actor.entropy_coeff=0.01"], True),  # in the loss
        (
            ["actor_rollout_ref.actor.ppo_mini_batch_size=7"],
            True,
        ),  # one step per batch: no old-log-prob pass to report it
    ],
)
def test_actor_update_computes_entropy_only_when_the_loss_or_the_metric_needs_it(overrides, with_entropy):
    cfg = Cfg(
        compose(
            [
                "actor_rollout_ref.rollout.n=1",
                "data.train_batch_size=7",
                "actor_rollout_ref.actor.ppo_mini_batch_size=3",
                *overrides,
            ]
        )
    )
    engine = _RecordingEngine()
    ctx = node_context(cfg, response_length=4, actor=engine, step=1)
    batch, _, _ = _mini_batch()
    _, metrics = update_actor(ctx, batch)
    assert engine.with_entropy and set(engine.with_entropy) == {with_entropy}
    assert ("actor/entropy" in metrics) == with_entropy


def test_truncated_importance_sampling_reweights_tokens_by_the_capped_ratio():
    """pi_old / pi_rollout per token, capped, without gradient: [e^0.5, e^-0.5, cap] for a cap of 1.5."""
    import math

    from dagrl.algo.policy_loss import PolicyLossSpec, actor_loss, truncated_is_weight
    from dagrl.data.batch import Batch

    old = torch.tensor([[-1.0, -2.0, -0.1]])
    rollout = torch.tensor([[-1.5, -1.5, -3.0]])
    weight = truncated_is_weight(old, rollout, cap=1.5)
    assert torch.allclose(weight, torch.tensor([[math.exp(0.5) if math.exp(0.5) < 1.5 else 1.5, math.exp(-0.5), 1.5]]))
    log_prob = old.clone().requires_grad_(True)
    batch = Batch(
        {
            "token_weights": torch.full((1, 3), 1 / 3),
            "advantages": torch.tensor([[1.0, -1.0, 2.0]]),
            "old_log_probs": old,
            "rollout_log_probs": rollout,
            "response_mask": torch.ones(1, 3),
        }
    )
    plain, _ = actor_loss(batch, log_prob, None, PolicyLossSpec())
    corrected, metrics = actor_loss(batch, log_prob, None, PolicyLossSpec(tis_imp_ratio_cap=1.5))
    # at ratio 1 the vanilla per-token loss is -A; TIS scales each token's term by its weight
    assert torch.isclose(plain, torch.tensor(-(1.0 - 1.0 + 2.0) / 3))
    expected = -(1.0 * weight[0, 0] - 1.0 * weight[0, 1] + 2.0 * weight[0, 2]) / 3
    assert torch.isclose(corrected, expected)
    assert torch.isclose(metrics["actor/tis_weight"], weight.mean())
    corrected.backward()
    assert torch.allclose(log_prob.grad, -torch.tensor([[1.0, -1.0, 2.0]]) * weight / 3)
