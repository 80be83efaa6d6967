"""The vLLM rollout colocated with the Megatron actor, one layout per launch (run by test_vllm_rollout.py).

usage: torchrun --nproc-per-node N vllm_worker.py ACTOR_TP ROLLOUT_TP WORK_DIR [ACTOR_PP]
  env DAGRL_FAMILY=qwen3_moe: a random Qwen3-MoE (actor EP = DAGRL_ACTOR_EP, default 1) instead of a dense Qwen3;
  env DAGRL_FP32_HEAD=1: fp32_lm_head on both sides (the actor's output layer and vLLM's head_dtype=float32);
  env DAGRL_MODEL_DIR: a real HF model directory instead of the random one, prompted with arithmetic questions;
  env DAGRL_KEEP_CACHE=1: free_cache_engine=False (no sleep: the prefix cache must be reset after each sync) and
      prompts of 2+ KV blocks (vLLM reuses full blocks only); DAGRL_SKIP_PREFIX_RESET=1 with it is the negative
      control: the sync after training leaves the cache alone, and the check against HF must fail.
A launch builds a random Qwen3-shaped model, a bf16 Megatron actor at ACTOR_TP and an in-process vLLM engine at
ROLLOUT_TP (load_format=dummy: only the sync gives it real weights), then runs the rollout node's memory
choreography and checks: greedy tokens are HF's argmax on the synced weights (up to bf16 near-ties), vLLM's log-probs
match the actor's, sleep frees the engine's memory, a training step + sync changes the output (and it still equals
HF), and a bad tensor fails the sync by name. Rank 0 writes WORK_DIR/result.json; a failed check raises (exit != 0).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dagrl.data.batch import Batch
from dagrl.engine.base import MegatronEngineSpec, OptimSpec
from dagrl.engine.rollout.interface import SamplingSpec
from dagrl.placement import ParallelLayout
from dagrl.plan.presets import peak_logits
from tests.engine.engine_helpers import sum_loss

EOS, PAD, VOCAB, PROMPTS, RESPONSE = 2, 0, 1024, 8, 16
FAMILY = os.environ.get("DAGRL_FAMILY", "qwen3")
FP32_HEAD = os.environ.get("DAGRL_FP32_HEAD") == "1"
ACTOR_EP = int(os.environ.get("DAGRL_ACTOR_EP", "1"))
REAL_MODEL = os.environ.get("DAGRL_MODEL_DIR")
KEEP_CACHE = os.environ.get("DAGRL_KEEP_CACHE") == "1"
SKIP_PREFIX_RESET = os.environ.get("DAGRL_SKIP_PREFIX_RESET") == "1"


def make_model(path: Path) -> None:
    """A random Qwen3 whose logits are peaked (scaled head), so bf16 greedy decoding has no near-ties."""
    from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

    shape = dict(
        vocab_size=VOCAB,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=32,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        eos_token_id=EOS,
        pad_token_id=PAD,
        bos_token_id=1,
    )
    if FAMILY == "qwen3_moe":
        config = Qwen3MoeConfig(
            **shape,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=128,
            decoder_sparse_step=1,
            norm_topk_prob=True,
        )
    else:
        config = Qwen3Config(**shape)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    peak_logits(model, 30.0)  # the untied head x30
    model.save_pretrained(path, safe_serialization=True)


def prompts_batch() -> Batch:
    """Left-padded prompts of uneven length (as the dataset makes them)."""
    g = torch.Generator().manual_seed(1)
    shortest = 36 if KEEP_CACHE else 4  # 36: two full 16-token blocks, which vLLM's prefix cache can reuse
    width = shortest + PROMPTS
    ids = torch.full((PROMPTS, width), PAD)
    mask = torch.zeros((PROMPTS, width), dtype=torch.long)
    for row in range(PROMPTS):
        length = shortest + row
        ids[row, width - length :] = torch.randint(3, VOCAB, (length,), generator=g)
        mask[row, width - length :] = 1
    return Batch(
        {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0)},
        {"uid": [str(row) for row in range(PROMPTS)]},
    )


def question_batch(model_dir: str) -> Batch:
    """Left-padded chat prompts of arithmetic questions, tokenized by the real model's tokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"What is {a} + {b}? Answer with a number."}],
            tokenize=False,
            add_generation_prompt=True,
        )
        for a, b in [(3, 4), (12, 9), (25, 17), (8, 8), (40, 2), (19, 23), (7, 36), (51, 14)]
    ]
    rows = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return Batch(
        {"input_ids": ids, "attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0)},
        {"uid": [str(row) for row in range(len(rows))]},
    )


def hf_greedy_margins(model_dir: Path, weights: dict[str, torch.Tensor], out: Batch) -> dict[str, float]:
    """Teacher-force vLLM's greedy responses through HF (fp32 compute on the synced bf16 weights): at each
    response position, how far vLLM's token is below HF's best logit, relative to that position's logit range.
    Wrong or stale weights give large gaps at once; bf16 kernel noise only flips near-ties."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in fused_experts(weights).items()}, strict=False)
    tied = ["lm_head.weight"] if model.config.tie_word_embeddings else []  # the export leaves the tied head out
    assert not unexpected and not [m for m in missing if "rotary" not in m and m not in tied], (missing, unexpected)
    batch = out.to("cuda")
    response_len = batch["responses"].shape[1]
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits.float()[:, -response_len - 1 : -1]
    chosen = logits.gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)
    best, worst = logits.max(-1).values, logits.min(-1).values
    mask = batch["response_mask"].bool()
    relative = ((best - chosen) / (best - worst))[mask]
    return {"argmax_fraction": (relative == 0).float().mean().item(), "max_relative_gap": relative.max().item()}


def fused_experts(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The export's per-expert tensors (experts.{e}.gate_proj/up_proj/down_proj.weight) in transformers 5's fused
    in-memory layout (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I])."""
    import re

    out, experts = {}, {}
    for name, tensor in weights.items():
        match = re.match(r"(.*\.mlp\.experts\.)(\d+)\.(gate_proj|up_proj|down_proj)\.weight$", name)
        if match is None:
            out[name] = tensor
        else:
            experts.setdefault(match.group(1), {}).setdefault(match.group(3), {})[int(match.group(2))] = tensor
    for prefix, parts in experts.items():
        order = sorted(parts["down_proj"])
        out[prefix + "gate_up_proj"] = torch.stack(
            [torch.cat([parts["gate_proj"][e], parts["up_proj"][e]]) for e in order]
        )
        out[prefix + "down_proj"] = torch.stack([parts["down_proj"][e] for e in order])
    return out


def vllm_tokens(batch: Batch) -> list[list[int]]:
    return [row[mask.bool()].tolist() for row, mask in zip(batch["responses"], batch["response_mask"])]


def exported(actor) -> dict[str, torch.Tensor]:
    return {name: t.clone() for bucket in actor.export_weights(64 << 20) for name, t in bucket}


def start_without_memory(work: Path) -> None:
    """Engine start when the GPU is already full: one line naming gpu_memory_utilization and the memory seen."""
    from dagrl.engine.megatron.parallel import init_distributed
    from dagrl.engine.rollout.vllm import VLLMRollout, VLLMRolloutSpec

    init_distributed()
    model_dir = work / "model"
    make_model(model_dir)
    free, total = torch.cuda.mem_get_info()
    hog = torch.empty(int(free - 0.2 * total), dtype=torch.uint8, device="cuda")  # leaves 20 % of the GPU
    try:
        VLLMRollout(
            VLLMRolloutSpec(model_path=str(model_dir), gpu_memory_utilization=0.5, max_model_len=128),
            eos_token_ids=[EOS],
            pad_token_id=PAD,
        )
        raise AssertionError("vLLM started with 50 % of a GPU that had 20 % free")
    except RuntimeError as err:
        message = str(err)
    assert "gpu_memory_utilization=0.5" in message and "GiB free" in message, message
    (work / "result.json").write_text(json.dumps({"oom_message": message.splitlines()[0][:400]}))
    del hog
    dist.destroy_process_group()


def session_context(actor, rollout, rollout_tp: int, prompts: Batch):
    """The StepContext the rollout session reads, built as the trainer builds one: the typed config, with small
    buckets (several loads per sync) and the actor's state offloaded around each rollout as a colocated run does,
    the shape of a run of these `prompts`, and no reference, critic or teacher."""
    from dagrl.config.load import compose
    from dagrl.config.schema.root import typed
    from dagrl.config.shape import RunShape
    from dagrl.config.tree import Cfg
    from dagrl.nodes.context import StepContext, WeightVersions

    overrides = [
        "actor_rollout_ref.rollout.update_weights_bucket_megabytes=1",
        "actor_rollout_ref.rollout.offload_train_state=true",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={rollout_tp}",
    ]
    world = dist.get_world_size() if dist.is_initialized() else 1
    shape = RunShape(
        world_size=world,
        rollout_tp=rollout_tp,
        prompt_length=prompts["input_ids"].shape[1],
        response_length=RESPONSE,
        grad_clip=1.0,
        train_rows=None,
        hf_config={},
    )
    return StepContext(
        cfg=typed(Cfg(compose(overrides))),
        shape=shape,
        actor=actor,
        rollout=rollout,
        reference=None,
        reward_fn=None,
        tokenizer=None,
        kl_ctrl=None,
        versions=WeightVersions(actor=0),
        rank=dist.get_rank() if dist.is_initialized() else 0,
    )


def main() -> None:
    if sys.argv[1] == "oom":
        return start_without_memory(Path(sys.argv[2]))
    actor_tp, rollout_tp, work = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    actor_pp = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    from dagrl.engine.megatron.actor import MegatronActorEngine
    from dagrl.engine.megatron.parallel import init_distributed
    from dagrl.engine.rollout.vllm import VLLMRollout, VLLMRolloutSpec
    from dagrl.nodes.common import rollout_session

    init_distributed()
    rank = dist.get_rank()
    model_dir = Path(REAL_MODEL) if REAL_MODEL else work / "model"
    if rank == 0 and not REAL_MODEL:
        make_model(model_dir)
    dist.barrier()
    result: dict = {
        "actor_tp": actor_tp,
        "actor_pp": actor_pp,
        "actor_ep": ACTOR_EP,
        "rollout_tp": rollout_tp,
        "world": dist.get_world_size(),
        "family": FAMILY,
        "fp32_lm_head": FP32_HEAD,
    }
    actor = MegatronActorEngine(
        MegatronEngineSpec(
            model_path=str(model_dir),
            layout=ParallelLayout(
                tensor_model_parallel_size=actor_tp,
                pipeline_model_parallel_size=actor_pp,
                expert_model_parallel_size=ACTOR_EP,
            ),
            optim=OptimSpec(lr=2e-3, weight_decay=0.0, total_training_steps=10),
            param_dtype=torch.bfloat16,
            fp32_lm_head=FP32_HEAD,
        )
    )
    free_before_engine = torch.cuda.mem_get_info()[0]
    start = time.perf_counter()
    rollout = VLLMRollout(
        VLLMRolloutSpec(
            model_path=str(model_dir),
            tensor_parallel_size=rollout_tp,
            gpu_memory_utilization=0.3,
            max_model_len=128,
            calculate_log_probs=True,
            fp32_lm_head=FP32_HEAD,
            free_cache_engine=not KEEP_CACHE,
        ),
        eos_token_ids=[EOS],
        pad_token_id=PAD,
    )
    result["engine_start_s"] = time.perf_counter() - start
    engine_bytes = free_before_engine - torch.cuda.mem_get_info()[0]

    # sleep frees the engine's memory (measured from the device's free memory)
    if not KEEP_CACHE:
        free_awake = torch.cuda.mem_get_info()[0]
        rollout.sleep()
        torch.cuda.synchronize()
        freed = torch.cuda.mem_get_info()[0] - free_awake
        result["sleep_freed_fraction"] = freed / engine_bytes
        assert freed >= 0.8 * engine_bytes, (freed, engine_bytes)

    prompts = question_batch(REAL_MODEL) if REAL_MODEL else prompts_batch()
    ctx = session_context(actor, rollout, rollout_tp, prompts)
    greedy = SamplingSpec(n=1, do_sample=False, response_length=RESPONSE)
    sampled = SamplingSpec(n=2, temperature=1.0, response_length=RESPONSE)

    def rollout_once(sampling: SamplingSpec, seed: int) -> tuple[Batch, dict]:
        with rollout_session(ctx) as sync_metrics:
            out = rollout.generate(prompts, sampling, seed=seed)
        return out, sync_metrics

    out, sync_metrics = rollout_once(greedy, seed=0)
    result["sync_s"], result["sync_gb"] = sync_metrics["timing_s/weight_sync"], sync_metrics["perf/weight_sync_gb"]
    got = vllm_tokens(out)
    result["greedy_vs_hf"] = hf_greedy_margins(model_dir, exported(actor), out)
    assert result["greedy_vs_hf"]["argmax_fraction"] >= 0.9 and result["greedy_vs_hf"]["max_relative_gap"] < 0.02, (
        result
    )

    # vLLM's processed log-probs vs the actor's on sampled tokens
    ctx.versions.rollout = -1  # force a fresh sync (the engine slept and dropped its weights anyway)
    out, _ = rollout_once(sampled, seed=1)
    actor_log_probs, _ = actor.compute_log_prob(out.to("cuda"), micro_batch_size=8, temperature=1.0, with_entropy=False)
    mask = out["response_mask"].cuda().bool()
    gap = (actor_log_probs - out["rollout_log_probs"].cuda()).abs()[mask]
    result["log_prob_gap_mean"], result["log_prob_gap_max"] = gap.mean().item(), gap.max().item()
    # The scaled head (logits ~ x30) magnifies bf16 noise; the real-model gap is the trainer's
    # training/rollout_log_probs_diff_mean metric.
    assert result["log_prob_gap_mean"] < 0.05, result

    # a training step, then the next rollout follows the new weights (and still equals HF on them)
    train = out.to("cuda")
    for _ in range(3):
        actor.train_step(train, sum_loss, micro_batch_size=8, temperature=1.0)
    ctx.versions.actor += 1
    if SKIP_PREFIX_RESET:
        rollout._cache_filled = False  # the sync believes the cache is empty: prompts reuse old-weight KV blocks
    after, later_sync = rollout_once(greedy, seed=0)
    result["later_sync_s"] = later_sync["timing_s/weight_sync"]  # the first sync also starts NCCL communicators
    plan = rollout.load_plan  # the syncs after the first replayed recorded copies: the checks below cover them
    result["load_plan"] = {
        **plan.stats,
        "plans": len(plan.plans),
        "unplannable": dict(list(plan.unplannable.items())[:3]),
    }
    assert plan.stats["replayed"] > 0 and len(plan.plans) > len(plan.unplannable), result["load_plan"]
    got_after = vllm_tokens(after)
    result["changed_after_train"] = sum(a != b for a, b in zip(got_after, got))
    result["greedy_vs_hf_after_train"] = hf_greedy_margins(model_dir, exported(actor), after)
    assert result["changed_after_train"] > 0, result
    assert result["greedy_vs_hf_after_train"]["argmax_fraction"] >= 0.9, result
    assert result["greedy_vs_hf_after_train"]["max_relative_gap"] < 0.02, result

    # a wrong shape fails the sync with the tensor's name
    rollout.wake_weights()
    bad = [("model.layers.0.self_attn.q_proj.weight", torch.zeros(3, 3, device="cuda"))]
    try:
        rollout.load_weights(iter([bad]))
        raise AssertionError("a wrong-shaped tensor was accepted")
    except ValueError as err:
        assert "model.layers.0.self_attn.q_proj.weight" in str(err)
        result["bad_sync_error"] = str(err)
    if rank == 0:
        (work / "result.json").write_text(json.dumps(result, indent=1))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
