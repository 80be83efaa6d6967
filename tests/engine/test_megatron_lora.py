"""LoRA on the Megatron actor (one process): adapters only train, step 0 is the base, the export merges exactly."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch

from dagrl.engine.base import MegatronEngineSpec, OptimSpec
from dagrl.engine.lora import LoraSpec
from engine_helpers import hf_log_probs, make_batch, resume_kwargs, sum_loss
from tiny_models import load_hf, make_model_dir

ADAM = OptimSpec(lr=1e-2, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)
LORA = LoraSpec(rank=4, alpha=8.0)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("models") / "qwen3", "qwen3")


def actor(path: Path, **kwargs):
    from dagrl.engine.megatron.actor import MegatronActorEngine

    return MegatronActorEngine(MegatronEngineSpec(model_path=str(path), optim=ADAM, **kwargs))


def exported(engine, adapters: bool = True) -> dict[str, torch.Tensor]:
    return {n: t.clone() for bucket in engine.export_weights(1 << 16, adapters=adapters) for n, t in bucket}


def adapter_params(engine) -> dict[str, torch.Tensor]:
    return {
        f"{i}.{name}": p.detach().clone()
        for i, m in enumerate(engine.modules)
        for name, p in m.named_parameters()
        if name.endswith(("lora_A", "lora_B"))
    }


def test_step_zero_is_the_base_and_only_adapters_train(model_dir):
    base = actor(model_dir)
    lora = actor(model_dir, lora=LORA)
    batch = make_batch(rows=4)
    want, _ = base.compute_log_prob(batch, 2, 1.0, with_entropy=False)
    got, _ = lora.compute_log_prob(batch, 2, 1.0, with_entropy=False)
    assert torch.equal(got, want)  # B = 0: the adapter adds exactly nothing
    trainable = [p for m in lora.modules for p in m.parameters() if p.requires_grad]
    assert len(trainable) == 4 * 2 * 2 == len(adapter_params(lora))  # 4 linears x 2 layers, A and B each
    optimized = [p for group in lora.optimizer.param_groups for p in group["params"]]
    assert sum(p.numel() for p in optimized) == sum(p.numel() for p in trainable)  # no state for the base
    before, adapters = exported(lora, adapters=False), adapter_params(lora)
    for _ in range(2):
        lora.train_step(batch, sum_loss, 2, 1.0)
    assert all(torch.equal(t, exported(lora, adapters=False)[n]) for n, t in before.items())  # base bit-identical
    after = adapter_params(lora)
    assert all(not torch.equal(adapters[n], after[n]) for n in adapters)  # every A and B moved
    moved, _ = lora.compute_log_prob(batch, 2, 1.0, with_entropy=False)
    assert (moved - want).abs().max() > 1e-3


def test_merged_export_is_the_adapted_model_and_adapters_off_is_the_base(model_dir):
    from dagrl.engine.megatron.lora import AdaptersOffReference

    lora = actor(model_dir, lora=LORA)
    batch = make_batch(rows=4)
    lora.train_step(batch, sum_loss, 2, 1.0)
    got, _ = lora.compute_log_prob(batch, 2, 1.0, with_entropy=False)
    hf = load_hf(model_dir)
    hf.load_state_dict(exported(lora), strict=False)
    want, _ = hf_log_probs(hf, batch)
    assert (got - want).abs().max() <= 1e-5  # merged weights == base + adapter forward
    adapter = lora.export_adapter()
    assert adapter.scaling == 2.0 and adapter.target_modules[:3] == ("q_proj", "k_proj", "v_proj")
    names = {n.split("layers.0.")[1] for n in adapter.tensors if ".layers.0." in n}
    assert names == {
        f"{m}.{f}.weight"
        for m in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        )
        for f in ("lora_A", "lora_B")
    }
    base = {n: t for n, t in exported(lora, adapters=False).items()}
    for name, weight in base.items():  # PEFT's rule: W + scaling * B A
        stem = "base_model.model." + name[: -len(".weight")]
        if f"{stem}.lora_A.weight" in adapter.tensors:
            a, b = adapter.tensors[f"{stem}.lora_A.weight"], adapter.tensors[f"{stem}.lora_B.weight"]
            assert a.shape[0] == b.shape[1] == 4 and b.shape[0] == weight.shape[0] and a.shape[1] == weight.shape[1]
    reference = AdaptersOffReference(lora)
    off, _ = reference.compute_log_prob(batch, 2, 1.0, with_entropy=False)
    hf.load_state_dict(base, strict=False)
    want_base, _ = hf_log_probs(hf, batch)
    assert (off - want_base).abs().max() <= 1e-5
    again, _ = lora.compute_log_prob(batch, 2, 1.0, with_entropy=False)
    assert torch.equal(again, got)  # back on after the reference pass


@pytest.mark.parametrize("distributed_optimizer", [False, True])
def test_checkpoint_holds_adapters_only_and_resumes_bit_identically(model_dir, tmp_path, distributed_optimizer):
    from megatron.core import dist_checkpointing

    from dagrl.engine.megatron.lora import read_adapter

    kwargs = resume_kwargs(LORA, distributed_optimizer)
    batch = make_batch(rows=4)
    first = actor(model_dir, **kwargs)
    first.train_step(batch, sum_loss, 2, 1.0)
    first.save_checkpoint(str(tmp_path / "ckpt"))
    continued = first.train_step(batch, sum_loss, 2, 1.0)
    saved = dist_checkpointing.load_tensors_metadata(str(tmp_path / "ckpt"))
    model_keys = {k for k in saved if not k.startswith("optimizer")}
    assert model_keys and all(k.endswith(("lora_A", "lora_B")) for k in model_keys), sorted(model_keys)[:4]
    assert all(k.endswith(("lora_A", "lora_B")) for k in saved if k.startswith("optimizer.state"))

    resumed = actor(model_dir, **kwargs)
    resumed.load_checkpoint(str(tmp_path / "ckpt"))
    assert resumed.train_step(batch, sum_loss, 2, 1.0) == continued
    want, got = first.export_adapter().tensors, resumed.export_adapter().tensors  # (params may be offloaded)
    assert want.keys() == got.keys() and all(torch.equal(want[n], got[n]) for n in want)
    adapter = read_adapter(str(tmp_path / "ckpt"))
    assert adapter.rank == 4 and adapter.alpha == 8.0 and len(adapter.tensors) == 2 * 7 * 2

    other = shutil.copytree(model_dir, tmp_path / "other_base")  # adapters belong to the base they trained on
    with pytest.raises(ValueError, match=f"actor_rollout_ref.model.path={model_dir}"):
        actor(other, **kwargs).load_checkpoint(str(tmp_path / "ckpt"))
    with pytest.raises(ValueError, match="lora.rank"):  # adapters do not load into a full model
        actor(model_dir, use_distributed_optimizer=distributed_optimizer).load_checkpoint(str(tmp_path / "ckpt"))


class _Rollout:
    """Records what a weight sync hands it."""

    supports_adapter = True

    def __init__(self) -> None:
        self.needs_weights, self.calls = True, []

    def load_weights(self, buckets, version=0):
        self.calls.append(("weights", {n: t.clone() for bucket in buckets for n, t in bucket}))
        self.needs_weights = False
        return {"perf/weight_sync_gb": 1.0}

    def load_adapter(self, adapter, version=0):
        self.calls.append(("adapter", adapter))
        return {"perf/weight_sync_gb": 0.001}


@pytest.mark.parametrize("merge", [False, True])
def test_weight_sync_modes(model_dir, merge):
    from types import SimpleNamespace

    from dagrl.nodes.common import sync_weights

    lora = actor(model_dir, lora=dataclasses.replace(LORA, merged=merge))  # as megatron_spec makes it beside vLLM
    lora.train_step(make_batch(rows=4), sum_loss, 2, 1.0)
    rollout = _Rollout()
    cfg = SimpleNamespace(
        actor_rollout_ref=SimpleNamespace(
            model=SimpleNamespace(lora=SimpleNamespace(rank=4, merge=merge)),
            rollout=SimpleNamespace(update_weights_bucket_megabytes=1),
        )
    )
    ctx = SimpleNamespace(cfg=cfg, rollout=rollout, actor=lora, versions=SimpleNamespace(actor=1, rollout=0))
    first = sync_weights(ctx)
    ctx.versions.actor = 2
    sync_weights(ctx)
    kinds = [kind for kind, _ in rollout.calls]
    if merge:
        assert kinds == ["weights", "weights"] and first == {"perf/weight_sync_gb": 1.0}
        assert all(torch.equal(rollout.calls[0][1][n], t) for n, t in exported(lora).items())
        return
    assert kinds == ["weights", "adapter", "adapter"]  # the base once, then the adapter alone
    assert first == {"perf/weight_sync_gb": 1.001}
    assert all(torch.equal(rollout.calls[0][1][n], t) for n, t in exported(lora, adapters=False).items())
    adapter = rollout.calls[-1][1]
    assert all(torch.equal(adapter.tensors[n], t) for n, t in lora.export_adapter().tensors.items())


@pytest.mark.parametrize("tp", [1, 2])
def test_plan_counts_the_adapters_and_gives_the_frozen_base_no_state(model_dir, tp):
    from dagrl.placement import WorldLayout
    from dagrl.plan import presets
    from dagrl.plan.memory import Recompute, RunSettings, stage_memory
    from dagrl.plan.model import ModelShape, lora_layer_params

    config = load_hf(model_dir).config.to_dict()
    shape = ModelShape.from_hf(config)
    engine = actor(model_dir, lora=LORA)
    per_layer = sum(p.numel() for p in adapter_params(engine).values()) // config["num_hidden_layers"]
    if tp == 1:
        assert lora_layer_params(shape, 4, LORA.targets, tp=1) == per_layer
    else:  # half of each split factor: one of the two of every linear
        assert lora_layer_params(shape, 4, LORA.targets, tp=2) < per_layer

    # Qwen3-8B, rank 32 on every linear, vLLM beside it on one 80 GB GPU: fits; full fine-tuning does not
    big = ModelShape.from_hf(presets.hf_config("qwen3", "8b").to_dict())
    layout = WorldLayout(world_size=1)
    run = RunSettings(
        bf16=True,
        reference=True,
        rollout="vllm",
        gpu_memory_gib=80,
        sequence_length=2048,
        response_length=1024,
        micro_batch=1,
        recompute=Recompute(granularity="full", method="uniform", num_layers=1),
        ref_log_prob_micro_batch=4,
    )
    full = stage_memory(big, layout, run, 0)
    lora = stage_memory(big, layout, dataclasses.replace(run, lora_rank=32, lora_targets=LORA.targets), 0)
    assert full.peak > 80 > lora.peak
    assert lora.parts["reference"] == 0 and lora.parts["optimizer"] < 1 and lora.parts["gradients"] < 1
    adapters = 36 * lora_layer_params(big, 32, LORA.targets, tp=1)
    assert 73e6 < adapters < 74e6  # 0.9% of the 8.2B base (one A for the fused QKV and gate/up)
    # merged sync: each forward also holds one linear's merge, the largest (gate/up: 4096 x 2 x 12288) in fp32 + bf16
    merged = stage_memory(
        big, layout, dataclasses.replace(run, lora_rank=32, lora_targets=LORA.targets, lora_merged=True), 0
    )
    merge_gib = 4096 * 2 * 12288 * (4 + 2) / 2**30
    assert merged.parts["lora merge"] == pytest.approx(merge_gib) and lora.parts["lora merge"] == 0
    for phase in ("log-prob", "update"):
        assert merged.phases[phase] - lora.phases[phase] == pytest.approx(merge_gib)
    assert merged.phases["rollout"] == lora.phases["rollout"]


def test_a_fused_norm_linear_normalises_its_input_before_the_adapter():
    """Transformer Engine's linear_qkv / linear_fc1 take the layer's un-normed input (their norm is fused in)."""
    from dagrl.engine.megatron.lora import _normalized

    module = torch.nn.Module()
    module.layer_norm_weight = torch.nn.Parameter(torch.rand(8) + 0.5)
    module.eps, module.normalization = 1e-6, "RMSNorm"
    x = torch.randn(3, 2, 8)
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * module.layer_norm_weight
    assert torch.allclose(_normalized(module, x), want, atol=1e-6)
    module.normalization, module.layer_norm_bias = "LayerNorm", torch.nn.Parameter(torch.randn(8))
    want = torch.nn.functional.layer_norm(x, (8,), module.layer_norm_weight, module.layer_norm_bias, 1e-6)
    assert torch.allclose(_normalized(module, x), want, atol=1e-6)
    assert _normalized(torch.nn.Linear(8, 8), x) is x  # the local spec's linears take the normed input


def test_offloaded_frozen_base_is_copied_to_the_host_once(model_dir):
    kwargs = dict(lora=LORA, param_offload=True, grad_offload=True, optimizer_offload=True)
    offloaded, resident = actor(model_dir, **kwargs), actor(model_dir, lora=LORA)
    base = sum(p.numel() * p.element_size() for m in resident.modules for p in m.parameters() if not p.requires_grad)
    assert offloaded.base_store.frozen and offloaded.base_store.nbytes == base
    assert offloaded.param_store.nbytes < base / 10  # the adapters alone
    before = exported(offloaded, adapters=False)
    batch = make_batch(rows=4)
    for _ in range(2):  # each step onloads and offloads again
        assert offloaded.train_step(batch, sum_loss, 2, 1.0) == resident.train_step(batch, sum_loss, 2, 1.0)
    after = exported(offloaded, adapters=False)
    assert all(torch.equal(before[n], after[n]) for n in before)
    got, want = offloaded.export_adapter().tensors, resident.export_adapter().tensors
    assert all(torch.equal(got[n], want[n]) for n in want)


def test_merged_and_adapter_only_sync_give_the_hf_rollout_identical_logits(model_dir):
    from dagrl.engine.rollout.hf import HFRollout

    lora = actor(model_dir, lora=LORA)
    lora.train_step(make_batch(rows=4), sum_loss, 2, 1.0)
    merged, adapter_only = (HFRollout(str(model_dir), [2], 0, torch.device("cpu")) for _ in range(2))
    merged.load_weights(lora.export_weights(1 << 16))
    adapter_only.load_weights(lora.export_weights(1 << 16, adapters=False))
    adapter_only.load_adapter(lora.export_adapter())
    ids = make_batch(rows=4)["input_ids"]
    with torch.no_grad():
        want, got = merged.model(input_ids=ids).logits, adapter_only.model(input_ids=ids).logits
        base = HFRollout(str(model_dir), [2], 0, torch.device("cpu")).model(input_ids=ids).logits
    assert torch.equal(got, want) and not torch.equal(got, base)


def test_an_moe_model_takes_attention_adapters_and_its_experts_none(tmp_path):
    moe_dir = make_model_dir(tmp_path / "moe", "qwen3_moe")
    lora = actor(moe_dir, lora=LoraSpec(rank=4, alpha=8.0, targets=("linear_qkv", "linear_proj")))
    assert adapter_params(lora) and all(".experts." not in n and ".self_attention." in n for n in adapter_params(lora))
    before = exported(lora, adapters=False)
    lora.train_step(make_batch(rows=4), sum_loss, 2, 1.0)
    lora.train_step(make_batch(rows=4), sum_loss, 2, 1.0)
    after = exported(lora, adapters=False)
    assert all(torch.equal(before[n], after[n]) for n in before)  # experts and router frozen too
    merged = exported(lora)
    changed = {n for n in merged if not torch.equal(merged[n], before[n])}
    assert changed and all(
        n.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight")) for n in changed
    )


SELECTIVE_MLP = {"recompute_granularity": "selective", "recompute_modules": ["mlp"]}


@pytest.mark.parametrize(
    "setting, lora",
    [
        ({"gradient_checkpointing": True}, LORA),  # full: every layer a span
        (
            {"override_transformer_config": SELECTIVE_MLP},
            dataclasses.replace(LORA, targets=("linear_fc1", "linear_fc2")),
        ),
    ],
    ids=["full", "selective_mlp"],
)
def test_adapters_train_under_activation_recompute(model_dir, setting, lora):
    """Megatron's recompute re-runs a span in backward and gives its parameters gradients only when an input of the
    span needs one; with the whole base frozen none would, and the adapters got no gradient at all. A selective
    span holding weights (the MLP) is such a span too, where the adapters are only in the MLP."""
    batch = make_batch(rows=4)
    plain, recompute = actor(model_dir, lora=lora), actor(model_dir, lora=lora, **setting)
    for _ in range(2):  # the second step with B off zero, so A's gradient is not zero either
        want, got = plain.train_step(batch, sum_loss, 2, 1.0), recompute.train_step(batch, sum_loss, 2, 1.0)
        assert want["actor/grad_norm"] > 0
        assert abs(got["actor/grad_norm"] - want["actor/grad_norm"]) <= 1e-6 * want["actor/grad_norm"]
    want, got = adapter_params(plain), adapter_params(recompute)
    assert all(torch.allclose(got[n], want[n], rtol=1e-5, atol=1e-6) for n in want)


@pytest.mark.parametrize("merged", [False, True], ids=["unmerged", "merged"])
def test_adapters_train_alike_on_packed_rows_in_token_budget_micro_batches(model_dir, merged):
    """use_remove_padding packs a micro-batch's sequences into one row and use_dynamic_bsz forms micro-batches by
    tokens: the adapters' inputs are then packed tokens, not padded rows, and must train as on padded fixed ones."""
    lora = dataclasses.replace(LORA, merged=merged)
    batch = make_batch(rows=6, prompt_len=9, response_len=8, seed=3)
    padded, packed = actor(model_dir, lora=lora), actor(model_dir, lora=lora, remove_padding=True)
    for _ in range(2):  # the second step with B off zero: the adapters shape the forward
        want = padded.train_step(batch, sum_loss, 2, 1.0)
        got = packed.train_step(batch, sum_loss, 2, 1.0, max_token_len=20)
        for key in ("loss", "actor/grad_norm"):
            assert got[key] == pytest.approx(want[key], rel=1e-5), key
    want_log_probs, _ = padded.compute_log_prob(batch, micro_batch_size=2, temperature=1.0, with_entropy=False)
    got_log_probs, _ = packed.compute_log_prob(batch, 2, temperature=1.0, with_entropy=False, max_token_len=20)
    torch.testing.assert_close(got_log_probs, want_log_probs, rtol=1e-5, atol=1e-6)
    want, got = padded.export_adapter().tensors, packed.export_adapter().tensors
    assert all((got[n] - want[n]).abs().max() <= 1e-3 * ADAM.lr for n in want)  # a thousandth of an Adam step
    assert any(t.abs().sum() > 0 for n, t in want.items() if "lora_B" in n)
