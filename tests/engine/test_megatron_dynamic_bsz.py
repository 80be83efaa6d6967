"""Dynamic batch size (verl's use_dynamic_bsz): micro-batches by a token budget give the same log-probs, loss and
gradient as fixed micro-batches, in the batch's row order, and never exceed the budget."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from dagrl.engine.base import MegatronEngineSpec, OptimSpec
from dagrl.engine.megatron.packing import fixed_bins, token_budget_bins
from engine_helpers import make_batch, sum_loss
from tiny_models import make_model_dir

ADAM = OptimSpec(lr=1e-3, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("models") / "qwen2", "qwen2", seed=2)


def engine(path: Path, optim: OptimSpec | None = None, **kwargs):
    from dagrl.engine.megatron.actor import MegatronActorEngine

    return MegatronActorEngine(MegatronEngineSpec(model_path=str(path), optim=optim, **kwargs))


def recording(actor) -> list:
    """Wrap the engine's micro-batch planner to keep every micro-batch it forms."""
    seen: list = []
    plan = actor._micro_batches

    def record(*args, **kwargs):
        micro_batches = plan(*args, **kwargs)
        seen.append(micro_batches)
        return micro_batches

    actor._micro_batches = record
    return seen


@pytest.mark.parametrize("seed", range(20))
def test_token_budget_bins_cover_every_row_once_within_the_budget(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(1, 40) for _ in range(rng.randint(1, 30))]
    budget = rng.randint(10, 60)
    min_bins = rng.choice([0, 3, 40])
    bins = token_budget_bins(lengths, budget, min_bins)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    assert len(bins) >= min_bins and all(b == sorted(b) for b in bins)
    for b in bins:
        assert len(b) == 1 or sum(lengths[i] for i in b) <= budget
    # balanced: each row went to the lightest bin, so loads differ by at most the longest row packed
    shared = [b for b in bins if not (len(b) == 1 and lengths[b[0]] > budget)]
    loads = [sum(lengths[i] for i in b) for b in shared]
    packed = [length for length in lengths if length <= budget]
    if packed:
        assert max(loads) - min(loads) <= max(packed)
    assert all(not b for b in bins[len([b for b in bins if b]) :])  # empty bins last


def test_token_budget_bins_balance_and_long_rows_alone():
    assert token_budget_bins([10, 10, 10, 10], 20) == [[0, 2], [1, 3]]  # lightest bin first, ties by index
    assert token_budget_bins([30, 5, 5], 20) == [[0], [1, 2]]
    assert token_budget_bins([9, 7, 6, 5, 3], 15) == [[0], [1, 4], [2, 3]]  # two bins cannot hold 30 tokens
    assert token_budget_bins([4, 4], 100, min_bins=3) == [[0], [1], []]  # spread over the bins asked for
    assert fixed_bins(5, 2, min_bins=4) == [[0, 1], [2, 3], [4], []]


def uneven_batch():
    """Rows of clearly different lengths (valid prompt + response), in a shuffled order."""
    batch = make_batch(rows=7, prompt_len=9, response_len=8, seed=3)
    return batch.select([3, 0, 6, 1, 5, 2, 4])


def test_log_probs_equal_fixed_micro_batches_in_row_order_and_within_budget(model_dir):
    batch = uneven_batch()
    actor = engine(model_dir)
    want, want_entropy = actor.compute_log_prob(batch, micro_batch_size=2, temperature=0.9, with_entropy=True)
    seen = recording(actor)
    budget = 24
    got, entropy = actor.compute_log_prob(
        batch, micro_batch_size=2, temperature=0.9, with_entropy=True, max_token_len=budget
    )
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6) and torch.allclose(
        entropy, want_entropy, rtol=1e-5, atol=1e-6
    )
    micro_batches = seen[0]
    assert sorted(i for m in micro_batches for i in m.index.tolist()) == list(range(len(batch)))
    assert len(micro_batches) > 1 and len({m.rows for m in micro_batches}) > 1  # the budget decided the sizes
    for micro in micro_batches:
        real_tokens = int((micro.tokens[: micro.rows] != 0).sum())  # make_batch's token ids are never 0
        assert micro.rows == 1 or real_tokens <= budget
        assert micro.tokens.shape[1] == max(int((row != 0).sum()) for row in micro.tokens[: micro.rows])


def test_the_vocabulary_projection_sees_real_response_tokens_only(model_dir):
    """One long response among short ones: the output layer (and the float32 log-prob math after it) gets each
    micro-batch's real response tokens, not rows x the longest response (what made an 8k-token tail run out of
    memory), and the log-probs are those of the padded layout."""
    batch = uneven_batch()
    batch["response_mask"][1:, 2:] = 0  # every row but the first stops after 2 tokens
    actor = engine(model_dir)
    want, want_entropy = actor.compute_log_prob(batch, micro_batch_size=1, temperature=0.9, with_entropy=True)
    widths = []
    for module in actor.modules:
        module.output_layer.register_forward_hook(lambda m, args, out: widths.append(args[0].shape[:2]))
    got, entropy = actor.compute_log_prob(batch, micro_batch_size=7, temperature=0.9, with_entropy=True)
    assert widths == [(int(batch["response_mask"].sum()), 1)]  # 8 + 6 x 2 tokens, not 7 rows x 8
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(entropy, want_entropy, rtol=1e-5, atol=1e-6)
    assert (got[1:, 2:] == 0).all() and (got[1:, :2] != 0).all()


def test_train_step_equals_fixed_micro_batches(model_dir):
    batch = uneven_batch()
    fixed = engine(model_dir, ADAM).train_step(batch, sum_loss, micro_batch_size=3, temperature=1.0)
    dynamic = engine(model_dir, ADAM).train_step(batch, sum_loss, micro_batch_size=3, temperature=1.0, max_token_len=20)
    for key in ("loss", "tokens", "actor/grad_norm"):
        assert dynamic[key] == pytest.approx(fixed[key], rel=1e-5), key


def test_a_row_longer_than_the_budget_gets_its_own_micro_batch(model_dir):
    batch = uneven_batch()
    actor = engine(model_dir)
    want, _ = actor.compute_log_prob(batch, micro_batch_size=7, temperature=1.0, with_entropy=False)
    seen = recording(actor)
    got, _ = actor.compute_log_prob(batch, micro_batch_size=7, temperature=1.0, with_entropy=False, max_token_len=1)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6)
    assert [m.rows for m in seen[0]] == [1] * len(batch)


@pytest.mark.slow
def test_ppo_run_with_dynamic_batch_size_and_packing_matches_fixed_padded_micro_batches(
    tiny_model, tiny_data, tmp_path
):
    """The trainer on CPU (PPO with KL loss: actor, reference, old log-probs and the critic all batch by tokens, in
    packed rows) against fixed, padded micro-batches."""
    import sys

    from tests.conftest import cpu_run_overrides
    from tests.helpers import metrics_by_step, run_in_session
    from tests.trainer.test_end_to_end import REWARD

    def run(out: Path, **extra) -> dict:
        args = cpu_run_overrides(
            tiny_model,
            tiny_data,
            out,
            **{
                "dag": "ppo",
                "algorithm.adv_estimator": "gae",
                "custom_reward_function.path": str(REWARD),
                "trainer.critic_warmup": 1,
                "trainer.val_before_train": False,
                "trainer.test_freq": -1,
                "actor_rollout_ref.actor.use_kl_loss": True,
                "actor_rollout_ref.actor.ppo_epochs": 2,  # old log-probs
                "data.train_batch_size": 4,
                "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
                "critic.ppo_micro_batch_size_per_gpu": 2,
                "critic.forward_micro_batch_size_per_gpu": 2,
                **extra,
            },
        )
        code, stderr = run_in_session([sys.executable, "-m", "dagrl.main_dag", *args])
        assert code == 0, stderr[-3000:]
        return metrics_by_step(out)

    budget = 40  # max_prompt_length 32 + max_response_length 6 = 38: about two rows per micro-batch
    dynamic = run(
        tmp_path / "dynamic",
        **{
            "actor_rollout_ref.actor.use_dynamic_bsz": True,
            "actor_rollout_ref.model.use_remove_padding": True,
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": budget,
            "critic.ppo_max_token_len_per_gpu": budget,
        },
    )
    fixed = run(tmp_path / "fixed")
    # step 1 warms the critic up (the actor is untouched), so step 2 samples the same responses in both runs
    for step, keys in (
        (1, ("critic/grad_norm", "critic/vf_loss", "critic/values/mean", "actor/entropy")),
        (2, ("actor/grad_norm", "actor/pg_loss", "actor/kl_loss", "critic/grad_norm")),
    ):
        for key in keys:
            assert dynamic[step][key] == pytest.approx(fixed[step][key], rel=1e-4, abs=1e-7), (step, key)


def test_nodes_pass_the_token_budget_only_when_switched_on():
    from dagrl.config.load import compose
    from dagrl.config.tree import Cfg
    from dagrl.nodes.common import token_budget

    cfg = Cfg(
        compose(
            [
                "actor_rollout_ref.actor.use_dynamic_bsz=true",
                "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096",
                "critic.use_dynamic_bsz=false",
            ]
        )
    )
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert token_budget(actor, "use_dynamic_bsz", "ppo_max_token_len_per_gpu") == 4096
    # verl's defaults: the log-prob passes follow the actor's switch and budget
    assert token_budget(rollout, "log_prob_use_dynamic_bsz", "log_prob_max_token_len_per_gpu") == 4096
    assert token_budget(cfg.critic, "use_dynamic_bsz", "forward_max_token_len_per_gpu") is None


def test_the_output_layers_gradient_comes_back_with_plain_strides():
    """The GPT model transposes the output layer's [N, 1, V] logits; the gradient comes back as a transpose of
    [1, N, V], which made torch.matmul copy the vocabulary weight once per row in the layer's backward (the CPU
    quickstart ran out of 24 GB). The actor's output-layer hook hands it on with plain strides."""
    from dagrl.engine.megatron.actor import _restride_output_grad

    logits = torch.randn(5, 1, 7, requires_grad=True)
    for hook, plain in ((lambda m, a, out: out, False), (_restride_output_grad, True)):
        logits.grad = None
        (hook(None, (), logits).transpose(0, 1) * torch.randn(1, 5, 7)).sum().backward()
        assert (logits.grad.stride() == (7, 7, 1)) == plain, logits.grad.stride()
