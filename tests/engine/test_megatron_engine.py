"""Single-process (TP=PP=DP=1) tests of the Megatron actor engine on tiny random HF models."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from dagrl.engine.base import MegatronEngineSpec, OptimSpec
from dagrl.placement import ParallelLayout
from engine_helpers import exported, hf_log_probs, make_batch, sum_loss
from tiny_models import FAMILIES, load_hf, make_model_dir


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    dirs = {family: make_model_dir(root / family, family, tie=family == "llama") for family in FAMILIES}
    dirs["llama4"] = make_model_dir(root / "llama4", "llama", num_layers=4, seed=1)
    return dirs


def engine(path: Path, optim: OptimSpec | None = None, **kwargs):
    from dagrl.engine.megatron.actor import MegatronActorEngine

    return MegatronActorEngine(MegatronEngineSpec(model_path=str(path), optim=optim, **kwargs))


ADAM = OptimSpec(lr=1e-3, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)


@pytest.mark.parametrize("family", FAMILIES)
def test_log_probs_match_hf_and_export_round_trip(model_dirs, family):
    reference = engine(model_dirs[family])
    hf = load_hf(model_dirs[family])
    batch = make_batch(rows=5)
    for temperature in (1.0, 0.7):
        log_probs, entropy = reference.compute_log_prob(
            batch, micro_batch_size=2, temperature=temperature, with_entropy=True
        )
        want_log_probs, want_entropy = hf_log_probs(hf, batch, temperature)
        assert log_probs.dtype == torch.float32 and log_probs.shape == batch["responses"].shape
        assert (log_probs - want_log_probs).abs().max() <= 1e-5
        assert (entropy - want_entropy).abs().max() <= 1e-5
        assert torch.all(log_probs[batch["response_mask"] == 0] == 0)

    bucket_bytes = 20_000
    buckets = list(reference.export_weights(bucket_bytes))
    for bucket in buckets:
        assert len(bucket) == 1 or sum(t.numel() * t.element_size() for _, t in bucket) <= bucket_bytes
    weights = {name: tensor for bucket in buckets for name, tensor in bucket}
    original = load_file(str(model_dirs[family] / "model.safetensors"))
    expected_names = set(original) - ({"lm_head.weight"} if family == "llama" else set())
    assert set(weights) == expected_names
    for name in expected_names:
        assert torch.equal(weights[name], original[name]), name


def test_gradient_is_that_of_the_summed_loss(model_dirs):
    """grad norm == HF's grad norm of the sum over the whole batch, for any micro-batch size."""
    path = model_dirs["qwen2"]
    batch = make_batch(rows=4)
    hf = load_hf(path)
    with torch.enable_grad():
        response_len = batch["responses"].shape[1]
        logits = hf(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits.float()[:, -response_len - 1 : -1]
        log_softmax = torch.log_softmax(logits, -1)
        log_probs = log_softmax.gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)
        entropy = -(log_softmax.exp() * log_softmax).sum(-1)
        loss, _ = sum_loss(batch, log_probs * batch["response_mask"], entropy * batch["response_mask"])
        loss.backward()
    want_norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in hf.parameters())).item()

    results = {}
    for micro_batch_size in (1, 3, 4):
        actor = engine(path, ADAM)
        metrics = actor.train_step(batch, sum_loss, micro_batch_size=micro_batch_size, temperature=1.0)
        results[micro_batch_size] = (metrics, exported(actor))
        assert metrics["actor/grad_norm"] == pytest.approx(want_norm, rel=1e-5)
        assert metrics["loss"] == pytest.approx(loss.item(), rel=1e-5)
        assert metrics["tokens"] == batch["response_mask"].sum().item()
        assert metrics["actor/skipped_steps"] == 0.0
    for name, tensor in results[1][1].items():
        assert torch.allclose(tensor, results[4][1][name], atol=2e-5), name


def test_training_reduces_loss_and_recompute_matches(model_dirs):
    batch = make_batch(rows=4)
    actor = engine(model_dirs["llama"], ADAM)
    losses = [actor.train_step(batch, sum_loss, 2, 1.0)["loss"] for _ in range(4)]
    assert losses[-1] < losses[0] * 0.9
    plain = engine(model_dirs["llama"], ADAM).train_step(batch, sum_loss, 2, 1.0)
    recompute = engine(model_dirs["llama"], ADAM, gradient_checkpointing=True).train_step(batch, sum_loss, 2, 1.0)
    assert recompute["actor/grad_norm"] == pytest.approx(plain["actor/grad_norm"], rel=1e-6)


def test_trainable_top_layers_freezes_the_rest(model_dirs):
    """Only the top layer and the final norm train, and activation recompute trains them alike: its reentrant
    spans give parameters gradients only where an input needs one, which a frozen embedding's output would not."""
    plain = engine(model_dirs["llama4"], ADAM, trainable_top_layers=1)
    recompute = engine(model_dirs["llama4"], ADAM, trainable_top_layers=1, gradient_checkpointing=True)
    before = exported(plain)
    want = plain.train_step(make_batch(rows=2), sum_loss, 2, 1.0)
    got = recompute.train_step(make_batch(rows=2), sum_loss, 2, 1.0)
    assert got["actor/grad_norm"] == pytest.approx(want["actor/grad_norm"], rel=1e-5)
    after, after_recompute = exported(plain), exported(recompute)
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed == {name for name in before if name.startswith("model.layers.3.") or name == "model.norm.weight"}
    assert all(torch.allclose(after_recompute[n], after[n], rtol=1e-5, atol=1e-6) for n in after)


def test_selective_recompute_of_core_attention_leaves_frozen_layers_out_of_the_backward(model_dirs):
    """Core attention holds no weights, so its recompute needs no gradient path from the embedding: the backward
    stops below the lowest trained layer, as without recompute (full recompute must run through them)."""
    reached = {}
    for label, kwargs in (
        ("plain", {}),
        ("selective", {"override_transformer_config": {"recompute_granularity": "selective"}}),
        ("full", {"gradient_checkpointing": True}),
    ):
        actor = engine(model_dirs["llama4"], ADAM, trainable_top_layers=1, **kwargs)
        calls = []
        layers = {name: m for name, m in actor.modules[0].named_modules() if name.endswith("decoder.layers.0")}
        next(iter(layers.values())).register_full_backward_hook(lambda *args: calls.append(1))
        reached[label] = (actor.train_step(make_batch(rows=2), sum_loss, 2, 1.0)["actor/grad_norm"], len(calls))
    assert reached["selective"][0] == pytest.approx(reached["plain"][0], rel=1e-5)
    assert (reached["plain"][1], reached["selective"][1], reached["full"][1]) == (0, 0, 1)


@pytest.mark.parametrize("style", ["cosine", "linear"])
def test_lr_schedule_step_by_step(model_dirs, style):
    optim = OptimSpec(
        lr=1e-3, lr_warmup_steps=2, lr_warmup_init=1e-4, lr_decay_style=style, min_lr=1e-4, total_training_steps=6
    )
    actor = engine(model_dirs["llama"], optim)
    batch = make_batch(rows=1, prompt_len=3, response_len=2)
    seen = [actor.train_step(batch, sum_loss, 1, 1.0)["actor/lr"] for _ in range(7)]
    expected = []
    for step in range(7):
        if step <= 2:
            expected.append(1e-4 + (1e-3 - 1e-4) * step / 2)
        elif step > 6:
            expected.append(1e-4)
        else:
            ratio = (step - 2) / 4
            coeff = 0.5 * (math.cos(math.pi * ratio) + 1) if style == "cosine" else 1 - ratio
            expected.append(1e-4 + (1e-3 - 1e-4) * coeff)
    assert seen == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    "distributed_optimizer, param_dtype",
    [(False, torch.float32), (True, torch.float32), (False, torch.bfloat16)],
    ids=["fp32", "fp32_distopt_offload", "bf16"],
)
def test_save_load_continues_bit_identically(model_dirs, tmp_path, distributed_optimizer, param_dtype):
    """bf16 too: its fp32 main params are saved and restored, or the resumed step would differ."""
    kwargs = dict(
        use_distributed_optimizer=distributed_optimizer,
        param_offload=distributed_optimizer,
        grad_offload=distributed_optimizer,
        optimizer_offload=distributed_optimizer,
        param_dtype=param_dtype,
    )
    batch = make_batch(rows=4)
    first = engine(model_dirs["qwen3"], ADAM, **kwargs)
    first.train_step(batch, sum_loss, 2, 1.0)
    first.save_checkpoint(str(tmp_path / "ckpt"))
    continued = first.train_step(batch, sum_loss, 2, 1.0)

    resumed_engine = engine(model_dirs["qwen3"], ADAM, **kwargs)
    resumed_engine.load_checkpoint(str(tmp_path / "ckpt"))
    resumed = resumed_engine.train_step(batch, sum_loss, 2, 1.0)
    assert resumed == continued
    assert all(torch.equal(a, b) for a, b in zip(exported(first).values(), exported(resumed_engine).values()))

    # Determinism: a fresh engine with the same seed retraces the first run exactly.
    rerun = engine(model_dirs["qwen3"], ADAM, **kwargs)
    rerun.train_step(batch, sum_loss, 2, 1.0)
    assert rerun.train_step(batch, sum_loss, 2, 1.0) == continued


@pytest.mark.parametrize(
    "family, distributed_optimizer",
    [("qwen3", False), ("qwen3", True), ("qwen3_moe", False)],
    ids=["plain", "distopt", "moe"],
)
def test_a_trained_engine_is_freed_when_dropped_and_steps_without_non_leaf_warnings(
    model_dirs, family, distributed_optimizer
):
    """Nothing of a trained engine may keep an autograd edge to a parameter's gradient accumulator, whose DDP hooks
    hold the model: a cycle the collector cannot see, so the engine, its buffers and its process groups were never
    freed. The distributed optimizer's fp32 shards (views of the parameters) did, with a non-leaf .grad warning
    every step, and so did an MoE dispatcher's routing probs of the last forward."""
    import gc
    import warnings
    import weakref

    trained = engine(model_dirs[family], ADAM, use_distributed_optimizer=distributed_optimizer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trained.train_step(make_batch(rows=4), sum_loss, 2, 1.0)
    assert not [w for w in caught if "not a leaf" in str(w.message)]
    model = weakref.ref(trained.model[0])
    del trained
    gc.collect()
    assert model() is None


@pytest.mark.parametrize("saved_distributed", [False, True])
def test_a_load_that_switches_the_optimizer_kind_is_refused_unless_the_weights_load_alone(
    model_dirs, tmp_path, saved_distributed
):
    # the plain and the distributed optimizer write their state in formats the other does not read (a KeyError deep
    # in megatron-core, either way, bf16 or fp32): one line naming the key instead
    batch = make_batch(rows=4)
    first = engine(model_dirs["qwen3"], ADAM, use_distributed_optimizer=saved_distributed)
    first.train_step(batch, sum_loss, 2, 1.0)
    first.save_checkpoint(str(tmp_path / "ckpt"))
    other = engine(model_dirs["qwen3"], ADAM, use_distributed_optimizer=not saved_distributed)
    with pytest.raises(ValueError, match=f"use_distributed_optimizer={str(saved_distributed).lower()}, or restore"):
        other.load_checkpoint(str(tmp_path / "ckpt"))
    weights = engine(
        model_dirs["qwen3"], ADAM, use_distributed_optimizer=not saved_distributed, load_contents=("model", "extra")
    )
    weights.load_checkpoint(str(tmp_path / "ckpt"))
    assert all(torch.equal(a, b) for a, b in zip(exported(first).values(), exported(weights).values()))


def test_offload_gives_identical_results_and_frees_storage(model_dirs):
    batch = make_batch(rows=3)
    results = []
    for offload in (False, True):
        actor = engine(
            model_dirs["qwen3_moe"], ADAM, param_offload=offload, grad_offload=offload, optimizer_offload=offload
        )
        if offload:
            assert actor.param_store.offloaded and actor.grad_store.offloaded and actor.optim_store.offloaded
            assert next(actor.modules[0].parameters()).untyped_storage().nbytes() == 0
        initial = exported(actor)  # the export keeps its parameter table from here on
        metrics = [actor.train_step(batch, sum_loss, 2, 1.0) for _ in range(2)]
        log_probs, _ = actor.compute_log_prob(batch, 2, 1.0, with_entropy=False)
        results.append((metrics, log_probs, exported(actor)))
        assert any(not torch.equal(initial[name], results[-1][2][name]) for name in initial)  # trained values
        if offload:
            assert actor.optim_store.nbytes > 0 and actor.optim_store.offloaded
    (m0, lp0, w0), (m1, lp1, w1) = results
    assert m0 == m1 and torch.equal(lp0, lp1)
    assert all(torch.equal(w0[name], w1[name]) for name in w0)


def test_non_finite_gradient_skips_the_step(model_dirs):
    actor = engine(model_dirs["llama"], ADAM)
    batch = make_batch(rows=2)
    before = exported(actor)

    def nan_loss(micro_batch, log_probs, entropy):
        loss, metrics = sum_loss(micro_batch, log_probs, entropy)
        return loss * float("nan"), metrics

    metrics = actor.train_step(batch, nan_loss, 2, 1.0)
    assert metrics["actor/skipped_steps"] == 1.0 and not math.isfinite(metrics["actor/grad_norm"])
    assert all(torch.equal(before[n], t) for n, t in exported(actor).items())
    assert actor.train_step(batch, sum_loss, 2, 1.0)["actor/skipped_steps"] == 0.0


def test_one_grad_norm_per_step_and_the_same_update_as_megatrons_step(model_dirs, monkeypatch):
    """The step reuses the grad norm its non-finite check took: Megatron's norm reduction runs once per step, and
    the parameters come out bit-identical to Megatron's own optimizer.step() (which copies the grads and reduces
    their norm again), with clipping active."""
    import megatron.core.optimizer.optimizer as megatron_optimizer

    from dagrl.engine.megatron import compat

    clipped = OptimSpec(lr=1e-3, weight_decay=0.0, clip_grad=1e-3, total_training_steps=10)
    batch = make_batch(rows=4)
    norms = []
    reduce_norm = megatron_optimizer.get_grad_norm_fp32
    monkeypatch.setattr(
        megatron_optimizer, "get_grad_norm_fp32", lambda *a, **k: norms.append(1) or reduce_norm(*a, **k)
    )
    results = []
    for plain in (False, True):
        if plain:  # the reference: Megatron's step as it stands, norm and grad copy done again
            monkeypatch.setattr(compat, "step_with_norm", lambda optimizer, norm: bool(optimizer.step()[0]))
        actor = engine(model_dirs["qwen3"], clipped, seed=7)
        norms.clear()
        metrics = [actor.train_step(batch, sum_loss, 2, 1.0) for _ in range(2)]
        results.append((len(norms), metrics, exported(actor)))
    (calls, metrics, weights), (plain_calls, plain_metrics, plain_weights) = results
    assert calls == 2 and plain_calls == 4  # one reduction per step instead of two
    assert metrics == plain_metrics and metrics[0]["actor/grad_norm"] > 1e-3  # the clip was applied
    assert all(torch.equal(weights[name], plain_weights[name]) for name in weights)


def test_override_transformer_config_rejects_unknown_keys(model_dirs):
    from transformers import AutoConfig

    from dagrl.engine.megatron.hf_config import transformer_config

    hf_config = AutoConfig.from_pretrained(model_dirs["llama"])
    config = transformer_config(
        hf_config,
        ParallelLayout(),
        torch.float32,
        on_gpu=False,
        gradient_checkpointing=True,
        overrides={"recompute_num_layers": 2},
    )
    assert (config.recompute_granularity, config.recompute_method, config.recompute_num_layers) == (
        "full",
        "uniform",
        2,
    )
    with pytest.raises(ValueError, match="override_transformer_config.recompute_layerz"):
        transformer_config(hf_config, ParallelLayout(), torch.float32, on_gpu=False, overrides={"recompute_layerz": 1})


def test_the_hf_rollout_takes_an_moe_actors_weights(model_dirs, tmp_path):
    """transformers >= 5 keeps an MoE layer's experts fused (gate_up_proj [E, 2I, H], down_proj [E, H, I]); the
    actor's export names one tensor per expert, as the checkpoint does. The hf rollout (another model of the same
    shapes) fills the fused tensors and then holds exactly the actor's weights; a sync that leaves out one expert's
    part is refused naming the fused tensor."""
    from dagrl.engine.rollout.hf import HFRollout

    actor = engine(model_dirs["qwen3_moe"])
    rollout = HFRollout(
        str(make_model_dir(tmp_path / "other", "qwen3_moe", seed=5)),
        eos_token_ids=[0],
        pad_token_id=0,
        device=torch.device("cpu"),
    )
    assert any(name.endswith("experts.gate_up_proj") for name, _ in rollout.model.named_parameters())
    want = load_hf(model_dirs["qwen3_moe"]).state_dict()
    assert any(not torch.equal(rollout.model.state_dict()[name], want[name]) for name in want)
    rollout.load_weights(actor.export_weights(1 << 16))
    got = rollout.model.state_dict()
    assert set(got) == set(want)
    assert not [name for name in want if not torch.equal(got[name], want[name])]
    partial = [
        [(n, t) for n, t in bucket if ".experts.1.up_proj." not in n] for bucket in actor.export_weights(1 << 16)
    ]
    with pytest.raises(RuntimeError, match="experts.gate_up_proj"):
        rollout.load_weights(iter(partial))
