"""GPU engine checks that need a process of their own (torchrun), run by tests/gpu/test_engine_checks.py.

usage: torchrun --nproc-per-node N engine_checks.py CHECK WORK_DIR [FAMILY]
  parity  (2 GPUs) bf16 log-probs of the Megatron engine (TransformerEngine spec) vs HF transformers on the same
          random Qwen3-shaped or Qwen3-MoE-shaped (EP2) weights, at TP2+SP and TP1, with TE's fused RoPE and SwiGLU
          and with both unfused; and the engine's log-probs compared bit for bit across the tensor-parallel ranks.
  offload (1 GPU) bytes each of param, grad and optimizer offload frees (torch.cuda.mem_get_info), and the next
          step's loss with offload cycles and with every offload flag on, against a run without offload.
  cp      (2 GPUs) packed (THD) sequences in bf16, CP1 (= DP2) and CP2 (also with LoRA adapters trained a step),
          against padded rows on the same weights:
          log-probs, loss and grad norm, with micro-batches of fixed size and by token budget; and whether packing
          runs in fp32 (TransformerEngine's THD attention had no fp32 kernel at CP2).
Writes WORK_DIR/result.json; the test asserts on it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dagrl.data.batch import Batch
from dagrl.engine.base import MegatronEngineSpec, OptimSpec
from dagrl.placement import ParallelLayout
from dagrl.plan.presets import hf_config
from tests.engine.engine_helpers import sum_loss

# Big enough to use the real kernels and head shapes, small enough to build in seconds.
SHAPES = {"qwen3": ("1.7b", 4), "qwen3_moe": ("30b-a3b", 2)}
if os.environ.get("DAGRL_CHECK_TINY"):  # a CPU dry run of this script (gloo, local spec)
    SHAPES = {"qwen3": ("tiny", 2), "qwen3_moe": ("tiny", 2)}
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Final-norm gains: 1 is the random init (logits of std ~1, nearly uniform); 3 gives peakier, more LM-like logits.
LOGIT_SCALES = (1.0, 3.0)


def random_batch(rows: int, prompt: int, response: int, vocab: int, seed: int = 0) -> Batch:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab, (rows, prompt + response), generator=generator)
    mask = torch.ones_like(input_ids)
    for row in range(rows):  # uneven prompt and response lengths
        mask[row, : row * 3] = 0
        mask[row, prompt + response - row * 5 :] = 0
    input_ids = input_ids * mask
    return Batch(
        {
            "input_ids": input_ids,
            "attention_mask": mask,
            "position_ids": (mask.cumsum(1) - 1).clamp(min=0),
            "responses": input_ids[:, prompt:].clone(),
            "response_mask": mask[:, prompt:].clone(),
        }
    )


def save_random_model(family: str, path: Path, dtype: torch.dtype) -> None:
    from transformers import AutoModelForCausalLM

    size, layers = SHAPES[family]
    config = hf_config(family, size, num_layers=layers)
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.save_pretrained(path, safe_serialization=True)


def hf_log_probs(model, batch: Batch, fp32_head: bool) -> torch.Tensor:
    """HF's bf16 log-probs; with `fp32_head` the LM head runs in fp32 on the bf16 hidden states (the rounding floor
    of bf16 logits is then visible as the gap between the two)."""
    from dagrl.engine.logits import hf_response_log_probs

    batch = batch.to(DEVICE)
    return hf_response_log_probs(model, batch, fp32_head) * batch["response_mask"]


def _tp_gathered_log_probs(engine, batch: Batch) -> tuple[torch.Tensor, bool]:
    """The engine's log-probs and whether every rank of its tensor-parallel group computed the same bits."""
    from megatron.core import parallel_state as ps

    mine, _ = engine.compute_log_prob(batch, micro_batch_size=2, temperature=1.0, with_entropy=False)
    group = ps.get_tensor_model_parallel_group()
    copies = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(copies, mine, group=group)
    return mine, all(torch.equal(copies[0], x) for x in copies)


def parity(work: Path, family: str) -> list[dict]:
    """Rows at TP2+SP: the engine's default fusions at final-norm gains 1 and 3, then (gain 1) an fp32 LM head, then
    RoPE and SwiGLU unfused (rounding where HF does); at TP1: default fusions, unfused. Each against HF bf16 and the
    exact fp32 value of the same weights."""
    from megatron.core import parallel_state as ps
    from transformers import AutoModelForCausalLM

    from dagrl.engine.megatron.actor import MegatronActorEngine

    path = work / family
    if dist.get_rank() == 0:
        save_random_model(family, path, torch.bfloat16)
    dist.barrier()
    experts = 2 if family == "qwen3_moe" else 1
    tp2 = ParallelLayout(
        tensor_model_parallel_size=2,
        sequence_parallel=True,
        expert_model_parallel_size=experts,
        expert_tensor_parallel_size=1 if experts > 1 else None,
    )
    tp1 = ParallelLayout(expert_model_parallel_size=experts)  # DP2 (EP2 for the MoE): no bf16 partial sums
    unfused = {"apply_rope_fusion": False, "bias_activation_fusion": False}
    batch = None
    results = []
    variants = [
        (tp2, {}, False, LOGIT_SCALES),
        (tp2, {}, True, (1.0,)),
        (tp2, unfused, False, (1.0,)),
        (tp1, {}, False, (1.0,)),
        (tp1, unfused, False, (1.0,)),
    ]
    for layout, overrides, fp32_head, scales in variants:
        if ps.model_parallel_is_initialized():
            ps.destroy_model_parallel()
        engine = MegatronActorEngine(
            MegatronEngineSpec(
                model_path=str(path),
                layout=layout,
                param_dtype=torch.bfloat16,
                fp32_lm_head=fp32_head,
                override_transformer_config=overrides,
            )
        )
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(DEVICE).eval()
        if batch is None:
            batch = random_batch(rows=4, prompt=64, response=192, vocab=engine.hf_config.vocab_size).to(DEVICE)
        mask = batch["response_mask"].bool()
        for scale in scales:
            with torch.no_grad():
                for module in engine.modules:
                    if getattr(module, "post_process", False):
                        module.decoder.final_layernorm.weight.fill_(scale)
                hf.model.norm.weight.fill_(scale)
            mine, bit_equal = _tp_gathered_log_probs(engine, batch)
            reference, fp32_reference = hf_log_probs(hf, batch, fp32_head), hf_log_probs(hf, batch, True)
            hf.float()  # the exact value of the same (bf16-rounded) weights: fp32 end to end
            exact = hf_log_probs(hf, batch, True)
            hf.to(torch.bfloat16)
            a, b, c, d = (x[mask].double() for x in (mine, reference, fp32_reference, exact))
            name = f"TP{layout.tensor_model_parallel_size}{'+SP' if layout.sequence_parallel else ''} EP{experts}"
            results.append(
                {
                    "family": family,
                    "layout": name,
                    "logit_scale": scale,
                    "fp32_lm_head": fp32_head,
                    "overrides": overrides,
                    "bit_equal_across_tp": bit_equal,
                    "cosine": float(torch.nn.functional.cosine_similarity(a, b, dim=0)),
                    "mean_abs_diff": float((a - b).abs().mean()),
                    "max_abs_diff": float((a - b).abs().max()),
                    "hf_bf16_vs_fp32_head_mean_abs_diff": float((b - c).abs().mean()),
                    "vs_fp32_cosine": float(torch.nn.functional.cosine_similarity(a, d, dim=0)),
                    "vs_fp32_mean_abs_diff": float((a - d).abs().mean()),
                    "hf_bf16_vs_fp32_mean_abs_diff": float((b - d).abs().mean()),
                    "mean_log_prob": float(b.mean()),
                    "tokens": int(mask.sum()),
                }
            )
        del engine, hf
    return results


def _packed_run(
    path: Path, batch: Batch, dtype: torch.dtype, packed: bool, cp: int, max_token_len: int | None, lora: bool = False
) -> dict:
    """Log-probs of every row (gathered over DP), loss and grad norm of one step, at one layout and packing. With
    `lora`, rank-8 adapters on every linear, trained one step first (B starts at zero) so that they shape the
    log-probs compared."""
    from megatron.core import parallel_state as ps

    from dagrl.engine.lora import LoraSpec
    from dagrl.engine.megatron.actor import MegatronActorEngine

    if ps.model_parallel_is_initialized():
        ps.destroy_model_parallel()
    engine = MegatronActorEngine(
        MegatronEngineSpec(
            model_path=str(path),
            layout=ParallelLayout(context_parallel_size=cp),
            param_dtype=dtype,
            remove_padding=packed,
            optim=OptimSpec(lr=1e-3 if lora else 1e-5, total_training_steps=10),
            lora=LoraSpec(rank=8, alpha=16) if lora else None,
        )
    )
    dp, dp_rank = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
    rows = batch.chunk(dp)[dp_rank]
    if lora:
        engine.train_step(rows, sum_loss, micro_batch_size=1, temperature=1.0, max_token_len=max_token_len)
    log_probs, _ = engine.compute_log_prob(
        rows, micro_batch_size=1, temperature=1.0, with_entropy=False, max_token_len=max_token_len
    )
    every = [torch.empty_like(log_probs) for _ in range(dist.get_world_size())]
    dist.all_gather(every, log_probs)  # rank order = DP order at CP1; at CP2 both ranks hold all rows
    metrics = engine.train_step(rows, sum_loss, micro_batch_size=1, temperature=1.0, max_token_len=max_token_len)
    return {
        "log_probs": torch.cat(every) if dp > 1 else log_probs,
        "loss": metrics["loss"],
        "grad_norm": metrics["actor/grad_norm"],
        "ranks_equal": dp > 1 or all(torch.equal(every[0], x) for x in every),
    }


def _compare(label: str, got: dict, want: dict, mask: torch.Tensor) -> dict:
    a, b = got["log_probs"][mask].double(), want["log_probs"][mask].double()
    return {
        "case": label,
        "ranks_equal": got["ranks_equal"],
        "log_prob_mean_abs_diff": float((a - b).abs().mean()),
        "log_prob_max_abs_diff": float((a - b).abs().max()),
        "cosine": float(torch.nn.functional.cosine_similarity(a, b, dim=0)),
        "loss": [want["loss"], got["loss"]],
        "grad_norm": [want["grad_norm"], got["grad_norm"]],
    }


def context_parallel(work: Path) -> dict:
    """bf16: packed (THD) CP1 and CP2 against padded CP1, with fixed micro-batches and by token budget; fp32: does
    packing run at all (TransformerEngine has no fp32 THD kernel) and match padded."""
    path = work / "qwen3"
    if dist.get_rank() == 0:
        save_random_model("qwen3", path, torch.bfloat16)
    dist.barrier()
    vocab = hf_config("qwen3", SHAPES["qwen3"][0]).vocab_size
    batch = random_batch(rows=4, prompt=96, response=160, vocab=vocab, seed=1).to(DEVICE)
    mask = batch["response_mask"].bool()
    cases = []
    for budget in (None, 300):  # micro-batches of one row, then by token budget (dynamic batch size)
        padded = _packed_run(path, batch, torch.bfloat16, False, 1, budget)
        for cp in (1, 2):
            cases.append(
                _compare(
                    f"bf16 packed CP{cp} budget={budget}",
                    _packed_run(path, batch, torch.bfloat16, True, cp, budget),
                    padded,
                    mask,
                )
            )
    lora_padded = _packed_run(path, batch, torch.bfloat16, False, 1, None, lora=True)
    cases.append(
        _compare(
            "bf16 LoRA packed CP2",
            _packed_run(path, batch, torch.bfloat16, True, 2, None, lora=True),
            lora_padded,
            mask,
        )
    )
    fp32 = {"padded": _packed_run(path, batch, torch.float32, False, 1, None)}
    try:
        fp32["compare"] = _compare(
            "fp32 packed CP1", _packed_run(path, batch, torch.float32, True, 1, None), fp32["padded"], mask
        )
    except Exception as err:  # recorded: whether fp32 packing can run on this TransformerEngine
        fp32["error"] = f"{type(err).__name__}: {str(err)[:300]}"
    return {"bf16": cases, "fp32_packed": fp32.get("compare") or fp32.get("error")}


def free_bytes() -> int:
    if not torch.cuda.is_available():
        return 0
    torch.cuda.synchronize()
    return torch.cuda.mem_get_info()[0]


def offload(work: Path) -> dict:
    from dagrl.engine.megatron.actor import MegatronActorEngine

    path = work / "qwen3"
    save_random_model("qwen3", path, torch.float32)

    def engine(**flags):
        return MegatronActorEngine(
            MegatronEngineSpec(
                model_path=str(path),
                param_dtype=torch.bfloat16,
                optim=OptimSpec(lr=1e-5, total_training_steps=10),
                **flags,
            )
        )

    batch = random_batch(rows=4, prompt=32, response=96, vocab=hf_config("qwen3", SHAPES["qwen3"][0]).vocab_size).to(
        DEVICE
    )

    def step(e) -> float:
        return e.train_step(batch, sum_loss, micro_batch_size=2, temperature=1.0)["loss"]

    plain = engine()
    plain_losses = [step(plain), step(plain)]
    del plain
    cycled = engine()
    first = step(cycled)
    freed = {}
    for name, store in (
        ("params", cycled.param_store),
        ("grads", cycled.grad_store),
        ("optimizer", cycled.optim_store),
    ):
        before = free_bytes()
        store.offload()
        after = free_bytes()
        freed[name] = {"bytes": store.nbytes, "freed": after - before, "fraction": (after - before) / store.nbytes}
    for store in (cycled.param_store, cycled.grad_store, cycled.optim_store):
        store.onload()
    cycled_losses = [first, step(cycled)]
    del cycled
    flagged = engine(param_offload=True, grad_offload=True, optimizer_offload=True)
    flagged_losses = [step(flagged), step(flagged)]
    idle_on_device = any(p.untyped_storage().nbytes() for m in flagged.modules for p in m.parameters())
    return {
        "freed": freed,
        "plain": plain_losses,
        "cycled": cycled_losses,
        "flagged": flagged_losses,
        "flagged_params_on_device_between_steps": idle_on_device,
    }


def main() -> None:
    check, work = sys.argv[1], Path(sys.argv[2])
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    from dagrl.engine.megatron.parallel import init_distributed

    init_distributed()
    work.mkdir(parents=True, exist_ok=True)
    checks = {
        "parity": lambda: parity(work, sys.argv[3]),
        "offload": lambda: offload(work),
        "cp": lambda: context_parallel(work),
    }
    result = checks[check]()
    results = [None] * dist.get_world_size()
    dist.all_gather_object(results, result)
    if dist.get_rank() == 0:
        (work / "result.json").write_text(json.dumps(results, indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
