"""LoRA with merged sync (LoraSpec.merged): the actor computes with the very weights the rollout receives (W + s·B·A
rounded to W's dtype) while its gradients stay those of the unmerged forward, the merge lives for one linear's
forward, the base and the export are what they are without it, and TP2 (gloo, the shared engine world) computes
what TP1 does."""

from __future__ import annotations

import dataclasses
import shutil
import weakref
from pathlib import Path

import pytest
import torch

from dagrl.engine.base import OptimSpec
from dagrl.engine.lora import LoraSpec
from dagrl.placement import ParallelLayout as L
from engine_helpers import actor_engine, exported, fresh_parallel_state, make_batch, sum_loss
from tiny_models import make_model_dir

ADAM = OptimSpec(lr=1e-2, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)
MERGED, UNMERGED = LoraSpec(rank=4, alpha=8.0, merged=True), LoraSpec(rank=4, alpha=8.0)
BF16 = {"param_dtype": torch.bfloat16}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("models") / "qwen3", "qwen3")


def merged_model_dir(engine, base_dir: Path, path: Path, write: bool = True) -> Path:
    """A copy of the base model directory whose weights are `engine`'s merged export: what the rollout loads (the
    export is collective; one rank of a world writes)."""
    from safetensors.torch import save_file

    tensors = {name: tensor.contiguous() for name, tensor in exported(engine).items()}
    if write:
        shutil.copytree(base_dir, path)
        save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def base_weights(engine) -> dict[str, torch.Tensor]:
    return {n: t.clone() for bucket in engine.export_weights(1 << 16, adapters=False) for n, t in bucket}


def log_probs(engine, batch) -> torch.Tensor:
    return engine.compute_log_prob(batch, 2, 1.0, with_entropy=False)[0]


def adapter_grads(engine) -> dict[str, torch.Tensor]:
    """The gradient of every lora_A / lora_B of the last train_step (Megatron's DDP keeps it in main_grad)."""
    return {
        f"{i}.{name}": param.main_grad.detach().clone()
        for i, module in enumerate(engine.modules)
        for name, param in module.named_parameters()
        if name.endswith(("lora_A", "lora_B"))
    }


def test_the_merged_actor_computes_with_the_weights_the_rollout_receives(model_dir, tmp_path):
    """bf16: merged mode's log-probs are bit for bit those of the full model loaded from the merged export;
    adapter-only mode's (base and adapter apart) are not. The first step (B = 0, so the merge is W) trains both modes
    alike and exports the same; after steps with B off zero the base is still bit-identical."""
    batch = make_batch(rows=4)
    merged = actor_engine(model_dir, ADAM, lora=MERGED, **BF16)
    unmerged = actor_engine(model_dir, ADAM, lora=UNMERGED, **BF16)
    base = base_weights(merged)
    assert merged.train_step(batch, sum_loss, 2, 1.0) == unmerged.train_step(batch, sum_loss, 2, 1.0)
    got, want = exported(merged), exported(unmerged)
    assert got.keys() == want.keys() and all(torch.equal(got[n], want[n]) for n in want)
    assert any(not torch.equal(got[n], base[n]) for n in base)  # B moved off zero: the merge is not the base

    full = actor_engine(merged_model_dir(merged, model_dir, tmp_path / "merged"), None, **BF16)
    served = log_probs(full, batch)
    assert torch.equal(log_probs(merged, batch), served)
    assert (log_probs(unmerged, batch) - served).abs().max() > 1e-3  # x·W + s·B·(A·x) rounds otherwise

    merged.train_step(batch, sum_loss, 2, 1.0)  # its forward and backward on a merge that is not W
    assert all(torch.equal(t, base[n]) for n, t in base_weights(merged).items())  # W back after every forward


def test_gradients_are_the_unmerged_forwards(model_dir):
    """fp32, B trained off zero: every lora_A / lora_B gradient of merged mode is unmerged mode's, with and without
    activation recompute. The base linear's backward must read W, not the merge: through the merge it would count the
    adapter twice in the gradient reaching earlier layers (their adapters' gradients are off by about 10 %)."""
    batch = make_batch(rows=4)
    grads = {}
    for label, lora, recompute in (
        ("unmerged", UNMERGED, False),
        ("merged", MERGED, False),
        ("recompute", MERGED, True),
    ):
        engine = actor_engine(model_dir, ADAM, lora=lora, gradient_checkpointing=recompute)
        engine.train_step(batch, sum_loss, 2, 1.0)  # B off zero, so the merge differs from W
        engine.train_step(batch, sum_loss, 2, 1.0)
        grads[label] = adapter_grads(engine)
    want = grads.pop("unmerged")
    assert len(want) == 2 * 4 * 2 and all(g.abs().max() > 0 for g in want.values())
    for label, got in grads.items():
        for name, tensor in want.items():
            scale = tensor.abs().max().item()
            torch.testing.assert_close(got[name], tensor, rtol=1e-5, atol=1e-5 * scale, msg=f"{label} {name}")


def _first_adapted_linear(engine) -> torch.nn.Module:
    from dagrl.engine.megatron.lora import adapted_linears

    return next(module for _, module in adapted_linears(engine.modules[0]))


def _watch(module: torch.nn.Module) -> list[dict]:
    """Per forward of `module`: whether its weight was swapped for a merge, whether W is back after the forward,
    and whether the merge's storage was freed by then (hooks registered after the adapter's own)."""
    base_ptr, seen = module.weight.data_ptr(), []

    def before(mod, args):
        storage = mod.weight.untyped_storage()
        seen.append({"swapped": mod.weight.data_ptr() != base_ptr, "storage": weakref.ref(storage)})

    def after(mod, args, output):
        seen[-1].update(restored=mod.weight.data_ptr() == base_ptr, freed=seen[-1]["storage"]() is None)

    module.register_forward_pre_hook(before)
    module.register_forward_hook(after)
    return seen


def test_the_merge_lives_for_one_forward_and_only_where_dropout_does_not_draw(model_dir):
    """The swap happens in training (dropout 0) and in eval, never with the adapters off or while dropout draws;
    after each forward the weight is W again and the merge's storage is gone (nothing, the autograd graph included,
    holds it)."""
    from dagrl.engine.megatron.lora import adapters_off

    batch = make_batch(rows=4)
    engine = actor_engine(model_dir, ADAM, lora=MERGED)
    seen = _watch(_first_adapted_linear(engine))
    engine.train_step(batch, sum_loss, 2, 1.0)
    log_probs(engine, batch)
    assert seen and all(s["swapped"] and s["restored"] and s["freed"] for s in seen), seen
    seen.clear()
    with adapters_off(engine.modules):
        log_probs(engine, batch)
    assert seen and not any(s["swapped"] for s in seen)

    dropout = actor_engine(model_dir, ADAM, lora=dataclasses.replace(MERGED, dropout=0.1))
    seen = _watch(_first_adapted_linear(dropout))
    dropout.train_step(batch, sum_loss, 2, 1.0)
    assert seen and not any(s["swapped"] for s in seen)  # a stochastic forward: unmerged
    seen.clear()
    log_probs(dropout, batch)
    assert seen and all(s["swapped"] and s["restored"] and s["freed"] for s in seen)


def test_the_merge_of_a_shard_is_the_shard_of_the_merge():
    """What lets every TP rank merge its own shard without communication: column-parallel (W and B split by rows)
    and row-parallel (W and A split by columns) shards merge to the full merge's shards, bit for bit."""
    from dagrl.engine.lora_peft import merged_weight

    g = torch.Generator().manual_seed(0)
    w = (0.02 * torch.randn(96, 64, generator=g)).bfloat16()
    a, b = (0.1 * torch.randn(8, 64, generator=g)).bfloat16(), (0.01 * torch.randn(96, 8, generator=g)).bfloat16()
    full = merged_weight(w, a, b, 2.0)
    assert not torch.equal(full, w)
    for rank in range(2):
        column = merged_weight(w.chunk(2, 0)[rank], a, b.chunk(2, 0)[rank], 2.0)
        row = merged_weight(w.chunk(2, 1)[rank], a.chunk(2, 1)[rank], b, 2.0)
        assert torch.equal(column, full.chunk(2, 0)[rank]) and torch.equal(row, full.chunk(2, 1)[rank])


JOB = "test_megatron_lora_merged:tp2"
TP2 = [("tp2", L(tensor_model_parallel_size=2)), ("tp2_sp", L(tensor_model_parallel_size=2, sequence_parallel=True))]


def prepare_world_job(name: str, work_dir: Path) -> None:
    from test_megatron_lora_layouts import trained

    model_dir = make_model_dir(work_dir / "qwen3", "qwen3", num_layers=4, seed=3)
    torch.save(trained(actor_engine(model_dir, ADAM, lora=MERGED), make_batch(rows=4)), work_dir / "tp1.pt")


def run_world_job(name: str, work_dir: Path) -> None:
    """fp32: merged mode at TP2 and TP2+SP trains as at TP1 (loss, grad norm, log-probs, adapter within 1e-5).
    bf16 at TP2: the merged actor's log-probs are bit for bit those of the full model loaded from its export."""
    import torch.distributed as dist
    from test_megatron_lora_layouts import trained

    def fresh(path: Path, layout, optim=ADAM, **kwargs):
        fresh_parallel_state()
        return actor_engine(path, optim, layout=layout, **kwargs)

    want, batch, model_dir = torch.load(work_dir / "tp1.pt"), make_batch(rows=4), work_dir / "qwen3"
    for label, layout in TP2:
        got = trained(fresh(model_dir, layout, lora=MERGED), batch)
        for (loss, norm), (want_loss, want_norm) in zip(got["steps"], want["steps"]):
            assert abs(loss - want_loss) <= 1e-5 * abs(want_loss), (label, loss, want_loss)
            assert abs(norm - want_norm) <= 1e-5 * abs(want_norm), (label, norm, want_norm)
        gap = (got["log_probs"] - want["log_probs"]).abs().max()
        assert gap <= 1e-5, f"{label}: log-probs differ by {gap}"
        worst = max((got["adapter"][n] - want["adapter"][n]).abs().max().item() for n in want["adapter"])
        assert worst <= 1e-5, f"{label}: adapter differs by {worst}"
        if dist.get_rank() == 0:
            print(f"OK {label}", flush=True)

    merged = fresh(model_dir, TP2[0][1], lora=MERGED, **BF16)
    merged.train_step(batch, sum_loss, 2, 1.0)
    served_dir = merged_model_dir(merged, model_dir, work_dir / "served", write=dist.get_rank() == 0)
    actor_log_probs = log_probs(merged, batch)
    dist.barrier()
    served = log_probs(fresh(served_dir, TP2[0][1], optim=None, **BF16), batch)
    assert torch.equal(actor_log_probs, served), (actor_log_probs - served).abs().max()
    if dist.get_rank() == 0:
        print("OK tp2_bf16_served", flush=True)


@pytest.mark.slow  # about 15 s of a 2-rank world on CPU; its fast siblings: the shard test and the TP1 tests above
@pytest.mark.engine_world(JOB)
def test_merged_at_tp2_equals_merged_at_tp1(engine_world):
    work_dir = engine_world.result(JOB)
    assert (work_dir / "stdout.txt").read_text().split() == ["OK", "tp2", "OK", "tp2_sp", "OK", "tp2_bf16_served"]
