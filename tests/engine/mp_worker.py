"""Multi-process engine checks, run by test_megatron_parallel.py under `torchrun --nproc-per-node 2` (gloo).

usage: torchrun --nproc-per-node 2 mp_worker.py SCENARIO MODEL_DIR WORK_DIR
Each scenario builds engines at several layouts in one launch (a 2-rank start costs ~6 s) and compares each
against layout-independent references computed with HF transformers on the full batch: log-probs, the grad norm
and loss of the summed loss, and the weights after one torch-Adam step. Any failed check raises (exit code != 0).
"""
from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).parent))

from dagrl.engine.base import MegatronEngineSpec, OptimSpec, ParallelLayout  # noqa: E402
from engine_helpers import exported, hf_log_probs, make_batch, per_expert_names, sum_loss  # noqa: E402
from tiny_models import load_hf  # noqa: E402

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
    ],
    "moe": [
        ("ep2", L(expert_model_parallel_size=2), {}, None),
        ("ep2_distopt", L(expert_model_parallel_size=2), {"use_distributed_optimizer": True}, None),
        # Not yet: loading the EP2 checkpoint here (optimizer param groups differ: KeyError 'pre_wd_mult').
        ("tp2_sp", L(tensor_model_parallel_size=2, sequence_parallel=True), {}, None),
    ],
}


def hf_reference(model_dir: str, batch) -> dict:
    """Log-probs, loss, grad norm and the weights after one Adam step, from HF on the full batch."""
    model = load_hf(Path(model_dir))
    log_probs, entropy = hf_log_probs(model, batch)
    response_len = batch["responses"].shape[1]
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                   position_ids=batch["position_ids"]).logits.float()[:, -response_len - 1:-1]
    log_softmax = torch.log_softmax(logits, -1)
    mask = batch["response_mask"]
    loss, _ = sum_loss(batch, log_softmax.gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1) * mask,
                       -(log_softmax.exp() * log_softmax).sum(-1) * mask)
    loss.backward()
    grad_norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters())).item()
    torch.optim.Adam(model.parameters(), lr=ADAM.lr, betas=ADAM.betas, eps=1e-8).step()
    weights = per_expert_names({name: p.detach().clone() for name, p in model.state_dict().items()})
    return dict(log_probs=log_probs, entropy=entropy, loss=loss.item(), grad_norm=grad_norm, weights=weights)


def my_rows(batch, layout: ParallelLayout):
    """This rank's share of the batch: DP ranks split it, model-parallel ranks see the same rows."""
    from megatron.core import parallel_state as ps
    dp_size, dp_rank = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
    return batch.chunk(dp_size)[dp_rank]


def close(a: float, b: float, rel: float = 1e-5) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b))


def check_layout(label: str, layout: ParallelLayout, kwargs: dict, load_from: str | None, model_dir: str,
                 work_dir: Path, reference: dict, batch, results: dict) -> None:
    from megatron.core import parallel_state

    from dagrl.engine.megatron.engine import MegatronActorEngine

    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    spec = MegatronEngineSpec(model_path=model_dir, layout=layout, optim=ADAM, **kwargs)
    engine = MegatronActorEngine(spec)
    rows = my_rows(batch, layout)

    # Export round trip of the untouched import, on every rank.
    original = per_expert_names(load_hf(Path(model_dir)).state_dict())
    weights = exported(engine, bucket_bytes=30_000)
    assert set(weights) == set(original), (label, set(weights) ^ set(original))
    assert all(torch.equal(weights[n], original[n]) for n in weights), f"{label}: export is not bit-exact"

    log_probs, entropy = engine.compute_log_prob(rows, micro_batch_size=1, temperature=1.0, with_entropy=True)
    want = reference["log_probs"].chunk(len(batch) // len(rows))[my_dp_rank()]
    assert (log_probs - want).abs().max() <= 1e-5, f"{label}: log-probs differ by {(log_probs - want).abs().max()}"
    want_entropy = reference["entropy"].chunk(len(batch) // len(rows))[my_dp_rank()]
    assert (entropy - want_entropy).abs().max() <= 1e-5, f"{label}: entropy differs"

    metrics = engine.train_step(rows, sum_loss, micro_batch_size=1, temperature=1.0)
    assert close(metrics["loss"], reference["loss"]), (label, metrics["loss"], reference["loss"])
    assert close(metrics["actor/grad_norm"], reference["grad_norm"]), (label, metrics, reference["grad_norm"])
    after = exported(engine)
    worst = max((after[n] - reference["weights"][n]).abs().max().item() for n in after)
    assert worst <= 2e-6, f"{label}: weights after one step differ from HF+Adam by {worst}"

    engine.save_checkpoint(str(work_dir / label))
    second = engine.train_step(rows, sum_loss, micro_batch_size=1, temperature=1.0)
    results[label] = {"step2": second, "weights2": {n: t for n, t in exported(engine).items()}}

    if load_from is not None:  # a checkpoint written at another layout continues like the original did
        engine.load_checkpoint(str(work_dir / load_from))
        resumed = engine.train_step(rows, sum_loss, micro_batch_size=1, temperature=1.0)
        saved = results[load_from]["step2"]
        for key in ("loss", "actor/grad_norm", "actor/lr"):
            assert close(resumed[key], saved[key]), (label, load_from, key, resumed[key], saved[key])
        resumed_weights = exported(engine)
        worst = max((resumed_weights[n] - results[load_from]["weights2"][n]).abs().max().item()
                    for n in resumed_weights)
        assert worst <= 2e-6, f"{label} loading {load_from}: weights differ by {worst}"
    if dist.get_rank() == 0:
        print(f"OK {label}: loss {metrics['loss']:.6f} grad_norm {metrics['actor/grad_norm']:.6f}", flush=True)


def my_dp_rank() -> int:
    from megatron.core import parallel_state as ps
    return ps.get_data_parallel_rank()


def main() -> None:
    warnings.filterwarnings("ignore")
    import faulthandler, os
    if os.environ.get("DAGRL_HANG_DUMP_S"):
        faulthandler.dump_traceback_later(float(os.environ["DAGRL_HANG_DUMP_S"]), exit=True)
    scenario, model_dir, work_dir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    dist.init_process_group("gloo")
    batch = make_batch(rows=4)
    reference = hf_reference(model_dir, batch)
    results: dict = {}
    for label, layout, kwargs, load_from in SCENARIOS[scenario]:
        if os.environ.get("DAGRL_ONLY") and label != os.environ["DAGRL_ONLY"]:
            continue
        check_layout(label, layout, kwargs, load_from, model_dir, work_dir, reference, batch, results)
    if dist.get_rank() == 0:
        (work_dir / "done.json").write_text(json.dumps([label for label, *_ in SCENARIOS[scenario]]))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
