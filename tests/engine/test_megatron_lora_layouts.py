"""LoRA on the Megatron actor at TP2, TP2+SP, PP2, PP2xVPP2, and DP2 and TP2 with the distributed optimizer, and an
MoE model's attention adapters at EP2 (plain and distributed optimizer) and TP2+SP (2 gloo ranks of the shared engine
world) against LoRA at TP1: log-probs, loss and grad norm of two Adam steps, the adapter in PEFT names after them, and
checkpoints continued at another layout (TP2 -> PP2, DP2 -> TP2, the MoE's EP2 -> TP2+SP)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dagrl.engine.base import MegatronEngineSpec, OptimSpec
from dagrl.engine.lora import LoraSpec
from dagrl.placement import ParallelLayout as L
from engine_helpers import fresh_parallel_state, make_batch, sum_loss
from tiny_models import make_model_dir

ADAM = OptimSpec(lr=1e-3, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)
LORA = LoraSpec(rank=4, alpha=8.0)
LAYOUTS = [  # (label, layout, engine kwargs, checkpoint of label to continue from)
    ("tp2", L(tensor_model_parallel_size=2), {}, None),
    ("tp2_sp", L(tensor_model_parallel_size=2, sequence_parallel=True), {}, None),
    ("pp2", L(pipeline_model_parallel_size=2), {}, "tp2"),
    ("pp2_vpp2", L(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2), {}, None),
    ("dp2_distopt", L(), {"use_distributed_optimizer": True}, None),
    ("tp2_distopt", L(tensor_model_parallel_size=2), {"use_distributed_optimizer": True}, "dp2_distopt"),
]
# An MoE model's experts take no adapter (pre-flight refuses fc targets there): attention adapters, experts split
# across EP ranks, the router and experts frozen.
MOE_LORA = LoraSpec(rank=4, alpha=8.0, targets=("linear_qkv", "linear_proj"))
MOE_LAYOUTS = [
    ("moe_ep2", L(expert_model_parallel_size=2), {}, None),
    ("moe_ep2_distopt", L(expert_model_parallel_size=2), {"use_distributed_optimizer": True}, None),
    ("moe_tp2_sp", L(tensor_model_parallel_size=2, sequence_parallel=True), {}, "moe_ep2"),
]
MODELS = {"qwen3": (LORA, LAYOUTS), "qwen3_moe": (MOE_LORA, MOE_LAYOUTS)}  # model dir: (adapters, layouts)
JOB = "test_megatron_lora_layouts:layouts"


def trained(engine, rows) -> dict:
    """Two Adam steps on `rows`: each step's loss and grad norm, then log-probs and the adapter."""
    steps = [engine.train_step(rows, sum_loss, micro_batch_size=1, temperature=1.0) for _ in range(2)]
    log_probs, _ = engine.compute_log_prob(rows, micro_batch_size=1, temperature=1.0, with_entropy=False)
    return {
        "steps": [(s["loss"], s["actor/grad_norm"]) for s in steps],
        "log_probs": log_probs.cpu(),
        "adapter": engine.export_adapter().tensors,
    }


def prepare_world_job(name: str, work_dir: Path) -> None:
    from dagrl.engine.megatron.actor import MegatronActorEngine

    for family, (lora, _) in MODELS.items():
        model_dir = make_model_dir(work_dir / family, family, num_layers=4, seed=3)
        engine = MegatronActorEngine(MegatronEngineSpec(model_path=str(model_dir), optim=ADAM, lora=lora))
        torch.save(trained(engine, make_batch(rows=4)), work_dir / f"{family}_tp1.pt")


def run_world_job(name: str, work_dir: Path) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from dagrl.engine.megatron.actor import MegatronActorEngine

    batch = make_batch(rows=4)
    continued = {}
    for family, label, layout, kwargs, load_from in (
        (family, *case) for family, (_, layouts) in MODELS.items() for case in layouts
    ):
        lora, want = MODELS[family][0], torch.load(work_dir / f"{family}_tp1.pt")
        fresh_parallel_state()
        spec = MegatronEngineSpec(model_path=str(work_dir / family), layout=layout, optim=ADAM, lora=lora, **kwargs)
        engine = MegatronActorEngine(spec)
        dp_size, dp_rank = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
        rows = batch.chunk(dp_size)[dp_rank]
        got = trained(engine, rows)
        for (loss, norm), (want_loss, want_norm) in zip(got["steps"], want["steps"]):
            assert abs(loss - want_loss) <= 1e-5 * abs(want_loss), (label, loss, want_loss)
            assert abs(norm - want_norm) <= 1e-5 * abs(want_norm), (label, norm, want_norm)
        gap = (got["log_probs"] - want["log_probs"].chunk(dp_size)[dp_rank]).abs().max()
        assert gap <= 1e-5, f"{label}: log-probs differ by {gap}"
        assert got["adapter"].keys() == want["adapter"].keys(), label
        worst = max((got["adapter"][n] - want["adapter"][n]).abs().max().item() for n in want["adapter"])
        assert worst <= 1e-5, f"{label}: adapter differs by {worst}"
        engine.save_checkpoint(str(work_dir / label))
        continued[label] = engine.train_step(rows, sum_loss, micro_batch_size=1, temperature=1.0)
        if load_from is not None:  # a LoRA checkpoint of another layout continues like the original did
            engine.load_checkpoint(str(work_dir / load_from))
            loaded = engine.export_adapter().tensors
            worst = max((loaded[n] - want["adapter"][n]).abs().max().item() for n in want["adapter"])
            assert worst <= 1e-5, f"{label} loading {load_from}: adapter differs by {worst}"
            resumed = engine.train_step(rows, sum_loss, micro_batch_size=1, temperature=1.0)
            for key in ("loss", "actor/grad_norm"):
                saved = continued[load_from][key]
                assert abs(resumed[key] - saved) <= 1e-5 * abs(saved), (label, load_from, key, resumed[key], saved)
        if dist.get_rank() == 0:
            print(f"OK {label}", flush=True)


@pytest.mark.engine_world(JOB)
def test_lora_at_every_layout_equals_lora_at_tp1(engine_world):
    work_dir = engine_world.result(JOB)
    labels = [label for _, layouts in MODELS.values() for label, *_ in layouts]
    assert (work_dir / "stdout.txt").read_text().split() == [w for label in labels for w in ("OK", label)]
