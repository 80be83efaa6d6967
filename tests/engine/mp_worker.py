"""Multi-process engine checks (gloo in test_family_matrix.py, NCCL in tests/gpu), one scenario per `torchrun`.

usage: torchrun --nproc-per-node 2 mp_worker.py SCENARIO MODEL_DIR WORK_DIR
Each scenario builds engines at several layouts in one launch (a 2-rank start costs ~6 s) and compares each
against layout-independent references computed with HF transformers on the full batch: log-probs, the grad norm
and loss of the summed loss, and the weights after one torch-Adam step. Any failed check raises (exit code != 0).
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).parent))

from dagrl.engine.base import MegatronEngineSpec, OptimSpec
from dagrl.placement import ParallelLayout
from engine_helpers import exported, fresh_parallel_state, hf_log_probs, make_batch, per_expert_names, sum_loss
from tiny_models import load_hf

ADAM = OptimSpec(lr=1e-3, weight_decay=0.0, clip_grad=1e9, total_training_steps=10)
L = ParallelLayout
SCENARIOS = {
    # name: [(label, layout, engine kwargs, load checkpoint of label)]. Checkpoints reshard across TP/PP/VPP/DP/EP
    # with the optimizer kind kept: the distributed optimizer's format stores main params, the plain one does not.
    "dense": [
        ("tp2", L(tensor_model_parallel_size=2), {}, None),
        ("tp2_sp", L(tensor_model_parallel_size=2, sequence_parallel=True), {}, None),
        ("pp2", L(pipeline_model_parallel_size=2), {}, "tp2"),
        ("pp2_vpp2", L(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2), {}, "tp2"),
        ("dp2", L(), {}, "tp2"),
        ("dp2_distopt", L(), {"use_distributed_optimizer": True}, None),
        ("tp2_distopt", L(tensor_model_parallel_size=2), {"use_distributed_optimizer": True}, "dp2_distopt"),
        # DP grad reduction during backward (the default on GPUs): the same step, the same checkpoints
        ("dp2_overlap", L(), {"overlap_grad_reduce": True}, "tp2"),
        ("dp2_distopt_overlap", L(), {"use_distributed_optimizer": True, "overlap_grad_reduce": True}, "dp2_distopt"),
    ],
    "moe": [
        ("ep2", L(expert_model_parallel_size=2), {}, None),
        ("ep2_distopt", L(expert_model_parallel_size=2), {"use_distributed_optimizer": True}, None),
        ("tp2_sp", L(tensor_model_parallel_size=2, sequence_parallel=True), {}, None),
    ],
}
FULL_RECOMPUTE = {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
# The same checks on GPUs (tests/gpu/test_engine_layouts.py): TransformerEngine spec, NCCL, grouped-GEMM experts
# with the alltoall dispatcher; TP2 -> TP1xDP2 checkpoint resharding; recompute variants.
SCENARIOS["gpu_dense"] = SCENARIOS["dense"] + [
    (
        "tp2_sp_recompute_full",
        L(tensor_model_parallel_size=2, sequence_parallel=True),
        {"override_transformer_config": FULL_RECOMPUTE},
        "tp2",
    ),
    (
        "tp2_recompute_selective",
        L(tensor_model_parallel_size=2),
        {"override_transformer_config": {"recompute_granularity": "selective"}},
        "tp2",
    ),
]
SCENARIOS["gpu_vpp"] = [  # batched p2p under VPP gave wrong gradients on GPUs; hf_config turns it off
    ("pp2_vpp2", L(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2), {}, None),
]
SCENARIOS["gpu_moe"] = [
    ("ep2", L(expert_model_parallel_size=2), {}, None),
    ("ep2_distopt", L(expert_model_parallel_size=2), {"use_distributed_optimizer": True}, None),
    (
        "tp2_sp_ep2",
        L(
            tensor_model_parallel_size=2,
            sequence_parallel=True,
            expert_model_parallel_size=2,
            expert_tensor_parallel_size=1,
        ),
        {},
        None,
    ),
    (
        "ep2_recompute_moe",
        L(expert_model_parallel_size=2),
        {"override_transformer_config": {"recompute_granularity": "selective", "recompute_modules": ["moe"]}},
        None,
    ),
]
SCENARIOS["gpu_dense4"] = [
    ("tp2_pp2", L(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, sequence_parallel=True), {}, None),
    (
        "tp2_pp2_vpp2",
        L(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2),
        {},
        "tp2_pp2",
    ),
    ("tp2_dp2_distopt", L(tensor_model_parallel_size=2), {"use_distributed_optimizer": True}, None),
]
SCENARIOS["gpu_moe4"] = [
    ("ep4", L(expert_model_parallel_size=4), {}, None),
    ("ep4_distopt", L(expert_model_parallel_size=4), {"use_distributed_optimizer": True}, None),
]
# Dynamic batch size and packing, checked like the layouts above but without checkpoints:
# (label, layout, engine kwargs, max_token_len). make_batch(4)'s rows hold 11, 9, 7 and 8 real tokens, so a budget
# of 16 gives DP rank 0 two micro-batches and rank 1 one (plus an empty one to keep in step); PP2 gets shapes that
# vary between micro-batches (exchanged between stages), PP2xVPP2 one shape per call.
BATCHING = {
    "batching": [
        ("dp2_dynamic", L(), {}, 16),
        ("dp2_packed_dynamic", L(), {"remove_padding": True}, 16),
        ("tp2_sp_packed", L(tensor_model_parallel_size=2, sequence_parallel=True), {"remove_padding": True}, None),
        ("pp2_dynamic", L(pipeline_model_parallel_size=2), {}, 16),
        ("pp2_packed", L(pipeline_model_parallel_size=2), {"remove_padding": True}, None),
        (
            "pp2_vpp2_packed_dynamic",
            L(pipeline_model_parallel_size=2, virtual_pipeline_model_parallel_size=2),
            {"remove_padding": True},
            16,
        ),
    ],
    "batching_moe": [  # expert parallelism: the i-th micro-batches of all DP ranks get one shape
        ("ep2_dynamic", L(expert_model_parallel_size=2), {}, 16),
        ("ep2_packed_dynamic", L(expert_model_parallel_size=2), {"remove_padding": True}, 16),
    ],
}
# GPU numerics differ from the CPU HF reference: TransformerEngine runs fp32 GEMMs in TF32 (it has no switch), so
# the GPU test scales the relative tolerances (DAGRL_TOL) and sets an absolute one on weights (DAGRL_WEIGHT_TOL).
TOL = float(os.environ.get("DAGRL_TOL", "1"))
WEIGHT_TOL = float(os.environ.get("DAGRL_WEIGHT_TOL", "2e-6"))  # absolute, on weights after one Adam step
# Share of weights allowed beyond WEIGHT_TOL: under TF32 an Adam step flips the sign of the update (2 x lr) of the
# rare weights whose gradient is rounding noise; 0 on CPU (exact fp32).
WEIGHT_OUTLIERS = float(os.environ.get("DAGRL_WEIGHT_OUTLIERS", "0"))


def weights_differ(got: dict, want: dict) -> str | None:
    """None when `got` matches `want` within WEIGHT_TOL (up to WEIGHT_OUTLIERS of elements), else a message."""
    total = sum(t.numel() for t in got.values())
    beyond = sum(int(((got[n] - want[n]).abs() > WEIGHT_TOL).sum()) for n in got)
    worst = max((got[n] - want[n]).abs().max().item() for n in got)
    if beyond > WEIGHT_OUTLIERS * total:
        return f"{beyond} of {total} weights differ by more than {WEIGHT_TOL} (worst {worst})"
    return None


def hf_reference(model_dir: str, batch) -> dict:
    """Log-probs, loss, grad norm and the weights after one Adam step, from HF on the full batch."""
    model = load_hf(Path(model_dir))
    log_probs, entropy = hf_log_probs(model, batch)
    response_len = batch["responses"].shape[1]
    logits = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
    ).logits.float()[:, -response_len - 1 : -1]
    log_softmax = torch.log_softmax(logits, -1)
    mask = batch["response_mask"]
    loss, _ = sum_loss(
        batch,
        log_softmax.gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1) * mask,
        -(log_softmax.exp() * log_softmax).sum(-1) * mask,
    )
    loss.backward()
    grad_norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters())).item()
    torch.optim.Adam(model.parameters(), lr=ADAM.lr, betas=ADAM.betas, eps=1e-8).step()
    weights = per_expert_names(
        {name: p.detach().clone() for name, p in model.state_dict().items()}, model.config.model_type
    )
    return dict(log_probs=log_probs, entropy=entropy, loss=loss.item(), grad_norm=grad_norm, weights=weights)


def my_rows(batch, layout: ParallelLayout):
    """This rank's share of the batch: DP ranks split it, model-parallel ranks see the same rows."""
    from megatron.core import parallel_state as ps

    dp_size, dp_rank = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
    return batch.chunk(dp_size)[dp_rank]


def close(a: float, b: float, rel: float = 1e-5) -> bool:
    return abs(a - b) <= rel * TOL * max(abs(a), abs(b))


def check_layout(
    label: str,
    layout: ParallelLayout,
    kwargs: dict,
    load_from: str | None,
    model_dir: str,
    work_dir: Path,
    reference: dict,
    batch,
    results: dict,
) -> None:

    from dagrl.engine.megatron.actor import MegatronActorEngine

    fresh_parallel_state()
    spec = MegatronEngineSpec(model_path=model_dir, layout=layout, optim=ADAM, **kwargs)
    engine = MegatronActorEngine(spec)
    rows = my_rows(batch, layout)
    names = {name: list(p.shape) for m in engine.modules for name, p in m.named_parameters()}
    if torch.cuda.is_available():  # the TransformerEngine spec: fused norms, grouped-GEMM experts
        assert any(n.endswith("linear_qkv.layer_norm_weight") for n in names), sorted(names)
        if any(".experts." in n for n in names):
            assert any(".experts.linear_fc1.weight" in n for n in names), sorted(names)
    if os.environ.get("DAGRL_RECORD_NAMES"):  # key/shape fixtures of the GPU model for the CPU tests
        record = Path(os.environ["DAGRL_RECORD_NAMES"]) / f"{Path(model_dir).name}_{label}_rank{dist.get_rank()}.json"
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"layout": label, "names": names}, indent=0))

    # Export round trip of the untouched import, on every rank.
    hf_model = load_hf(Path(model_dir))
    original = per_expert_names(hf_model.state_dict(), hf_model.config.model_type)
    if hf_model.config.tie_word_embeddings:  # the export (like HF's files) has no lm_head.weight then
        original.pop("lm_head.weight")
    weights = exported(engine, bucket_bytes=30_000)
    assert set(weights) == set(original), (label, set(weights) ^ set(original))
    assert all(torch.equal(weights[n], original[n]) for n in weights), f"{label}: export is not bit-exact"

    log_probs, entropy = engine.compute_log_prob(rows, micro_batch_size=1, temperature=1.0, with_entropy=True)
    want = reference["log_probs"].chunk(len(batch) // len(rows))[my_dp_rank()]
    assert (log_probs - want).abs().max() <= 1e-5 * TOL, (
        f"{label}: log-probs differ by {(log_probs - want).abs().max()}"
    )
    want_entropy = reference["entropy"].chunk(len(batch) // len(rows))[my_dp_rank()]
    assert (entropy - want_entropy).abs().max() <= 1e-5 * TOL, f"{label}: entropy differs"

    metrics = engine.train_step(rows, sum_loss, micro_batch_size=1, temperature=1.0)
    assert close(metrics["loss"], reference["loss"]), (label, metrics["loss"], reference["loss"])
    assert close(metrics["actor/grad_norm"], reference["grad_norm"]), (label, metrics, reference["grad_norm"])
    after = exported(engine)
    problem = weights_differ(after, reference["weights"])
    assert problem is None, f"{label}: weights after one step vs HF+Adam: {problem}"

    engine.save_checkpoint(str(work_dir / label))
    second = engine.train_step(rows, sum_loss, micro_batch_size=1, temperature=1.0)
    results[label] = {"step2": second, "weights2": {n: t for n, t in exported(engine).items()}}

    if load_from is not None:  # a checkpoint written at another layout continues like the original did
        engine.load_checkpoint(str(work_dir / load_from))
        resumed = engine.train_step(rows, sum_loss, micro_batch_size=1, temperature=1.0)
        saved = results[load_from]["step2"]
        for key in ("loss", "actor/grad_norm", "actor/lr"):
            assert close(resumed[key], saved[key]), (label, load_from, key, resumed[key], saved[key])
        problem = weights_differ(exported(engine), results[load_from]["weights2"])
        assert problem is None, f"{label} loading {load_from}: {problem}"
    if dist.get_rank() == 0:
        print(f"OK {label}: loss {metrics['loss']:.6f} grad_norm {metrics['actor/grad_norm']:.6f}", flush=True)


def check_batching(
    label: str, layout: ParallelLayout, kwargs: dict, max_token_len: int | None, model_dir: str, reference: dict, batch
) -> None:
    """Log-probs, entropy, loss, grad norm and the weights after one Adam step against HF, with micro-batches of
    one row or by the token budget `max_token_len`, padded or packed (`remove_padding` in kwargs)."""

    from dagrl.engine.megatron.actor import MegatronActorEngine

    fresh_parallel_state()
    engine = MegatronActorEngine(MegatronEngineSpec(model_path=model_dir, layout=layout, optim=ADAM, **kwargs))
    rows = my_rows(batch, layout)
    part = len(batch) // len(rows)
    log_probs, entropy = engine.compute_log_prob(
        rows, micro_batch_size=1, temperature=1.0, with_entropy=True, max_token_len=max_token_len
    )
    for name, got in (("log_probs", log_probs), ("entropy", entropy)):
        gap = (got.cpu() - reference[name].chunk(part)[my_dp_rank()]).abs().max()
        assert gap <= 1e-5 * TOL, f"{label}: {name} differ by {gap}"
    metrics = engine.train_step(rows, sum_loss, micro_batch_size=1, temperature=1.0, max_token_len=max_token_len)
    assert close(metrics["loss"], reference["loss"]), (label, metrics["loss"], reference["loss"])
    assert close(metrics["actor/grad_norm"], reference["grad_norm"]), (label, metrics, reference["grad_norm"])
    after = exported(engine)
    problem = weights_differ(after, reference["weights"])
    assert problem is None, f"{label}: weights after one step vs HF+Adam: {problem}"
    if dist.get_rank() == 0:
        print(f"OK {label}: loss {metrics['loss']:.6f} grad_norm {metrics['actor/grad_norm']:.6f}", flush=True)


def my_dp_rank() -> int:
    from megatron.core import parallel_state as ps

    return ps.get_data_parallel_rank()


def main() -> None:
    warnings.filterwarnings("ignore")
    import faulthandler

    if os.environ.get("DAGRL_HANG_DUMP_S"):
        faulthandler.dump_traceback_later(float(os.environ["DAGRL_HANG_DUMP_S"]), exit=True)
    scenario, model_dir, work_dir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    batch = make_batch(rows=4)
    reference = hf_reference(model_dir, batch)
    results: dict = {}
    cases = SCENARIOS.get(scenario) or BATCHING[scenario]
    for label, layout, kwargs, extra in cases:
        if os.environ.get("DAGRL_ONLY") and label != os.environ["DAGRL_ONLY"]:
            continue
        if scenario in BATCHING:
            check_batching(label, layout, kwargs, extra, model_dir, reference, batch)
        else:
            check_layout(label, layout, kwargs, extra, model_dir, work_dir, reference, batch, results)
    if dist.get_rank() == 0:
        work_dir.mkdir(parents=True, exist_ok=True)
        (work_dir / "done.json").write_text(json.dumps([label for label, *_ in cases]))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
