"""Where the step-0 rollout/train log-prob gap comes from: vLLM and the Megatron actor against exact values.

usage (GPU machine, megatron-core + vLLM; a real HF model dir and a prompt parquet):
    torchrun --nproc-per-node 1 benchmarks/log_prob_gap.py --model /tmp/smol --data /tmp/data/test.parquet

The actor (Megatron, bf16) syncs its weights into vLLM (bf16) exactly as the trainer does, vLLM samples responses
with its processed log-probs, and the same tokens are scored by the actor, by HF transformers in bf16 and by HF in
fp32 on the same (bf16-valued) weights: the exact value. Each pair's mean |Δ log-prob| over the response tokens
is one row; --fp32-head runs every LM head in fp32 (vLLM's hf_overrides head_dtype, dagrl's model.fp32_lm_head).
The trainer reports the vLLM-vs-actor row as training/rollout_log_probs_diff_mean. --variants scores the same
tokens with actors built under other TransformerConfig fusions (override_transformer_config), one after another.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dagrl.engine.base import MegatronEngineSpec
from dagrl.engine.rollout.interface import SamplingSpec
from dagrl.placement import ParallelLayout
from dagrl.engine.logits import hf_response_log_probs


# Actor numerics to compare: TransformerEngine's fused RoPE computes in fp32 and the fused SwiGLU rounds once, where
# HF and vLLM round cos/sin and silu(gate) to bf16 first.
VARIANTS = {
    "fused": {},
    "rope-unfused": {"apply_rope_fusion": False},
    "swiglu-unfused": {"bias_activation_fusion": False},
    "unfused": {"apply_rope_fusion": False, "bias_activation_fusion": False},
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--response-length", type=int, default=12)
    parser.add_argument("--fp32-head", action="store_true", help="LM head in fp32 on both sides")
    parser.add_argument(
        "--variants",
        nargs="+",
        choices=list(VARIANTS),
        default=["fused"],
        help="actor fusions to score with (the first also feeds vLLM its weights)",
    )
    parser.add_argument("--cuda-graphs", action="store_true", help="vLLM with CUDA graphs (enforce_eager=False)")
    args = parser.parse_args()

    from megatron.core import parallel_state as ps
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dagrl.data.dataset import PromptDataset
    from dagrl.engine.megatron.actor import MegatronActorEngine
    from dagrl.engine.megatron.parallel import init_distributed
    from dagrl.engine.rollout.vllm import VLLMRollout, VLLMRolloutSpec

    init_distributed()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    prompts = PromptDataset([args.data], tokenizer, max_prompt_length=64).rows(range(args.prompts))
    sampling = SamplingSpec(n=args.n, temperature=1.0, response_length=args.response_length)
    eos = [tokenizer.eos_token_id]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]

    def actor(variant: str) -> MegatronActorEngine:
        if ps.model_parallel_is_initialized():
            ps.destroy_model_parallel()
        return MegatronActorEngine(
            MegatronEngineSpec(
                model_path=args.model,
                layout=ParallelLayout(),
                param_dtype=torch.bfloat16,
                fp32_lm_head=args.fp32_head,
                override_transformer_config=VARIANTS[variant],
            )
        )

    engine = actor(args.variants[0])
    rollout = VLLMRollout(
        VLLMRolloutSpec(
            model_path=args.model,
            gpu_memory_utilization=0.3,
            max_model_len=512,
            calculate_log_probs=True,
            fp32_lm_head=args.fp32_head,
            enforce_eager=not args.cuda_graphs,
        ),
        eos,
        pad,
    )
    rollout.load_weights(engine.export_weights(1 << 30))  # the trainer's sync
    out = rollout.generate(prompts, sampling, seed=0).to("cuda")
    mask = out["response_mask"].bool()
    scores = {"vLLM": out["rollout_log_probs"]}
    for index, variant in enumerate(args.variants):
        engine = actor(variant) if index else engine
        scores[f"actor {variant}"], _ = engine.compute_log_prob(
            out, micro_batch_size=64, temperature=1.0, with_entropy=False
        )
    hf = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).cuda().eval()
    scores["HF bf16"] = hf_response_log_probs(hf, out, args.fp32_head)
    exact = "exact (HF fp32)"
    scores[exact] = hf_response_log_probs(hf.float(), out, True)
    print(
        f"\n{Path(args.model).name}: {args.prompts} prompts x n={args.n}, {int(mask.sum())} response tokens, "
        f"temperature 1, LM head {'fp32' if args.fp32_head else 'bf16'}, vLLM "
        f"{'with CUDA graphs' if args.cuda_graphs else 'eager'}"
    )
    print("| pair | mean abs diff | max abs diff |\n|---|---|---|")
    actors = [f"actor {v}" for v in args.variants]
    pairs = (
        [("vLLM", a) for a in actors]
        + [("vLLM", exact)]
        + [(a, exact) for a in actors]
        + [("HF bf16", exact)]
        + [("vLLM", "HF bf16")]
        + [(a, "HF bf16") for a in actors]
    )
    for a, b in pairs:
        gap = (scores[a].float() - scores[b].float()).abs()[mask]
        print(f"| {a} vs {b} | {gap.mean().item():.4f} | {gap.max().item():.3f} |")


if __name__ == "__main__":
    main()
