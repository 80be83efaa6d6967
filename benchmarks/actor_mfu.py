"""MFU of dagrl's actor update against bare Megatron-Core on the same model, layout and tokens, in one run.

usage (GPU machine, megatron-core + TransformerEngine):
    torchrun --nproc-per-node 2 benchmarks/actor_mfu.py --size 8b --tp 2 --sp
    torchrun --nproc-per-node 2 benchmarks/actor_mfu.py --size 1.7b
CPU smoke test (tiny model, gloo): torchrun --nproc-per-node 1 benchmarks/actor_mfu.py --size tiny --seq 64 --prompt 16

In one process, in this order:
  1. peak: a bf16 8192^3 matmul (the same-run ceiling MFU is measured against);
  2. bare: Megatron-Core's own next-token training step of a GPTModel (cross-entropy on every position), DDP
     with overlapped grad reduction, the distributed optimizer;
  3. dagrl: MegatronActorEngine.train_step with the PPO loss (log-probs on vocab-parallel logits, token-mean
     weights, old log-probs, advantages; the entropy too with `--entropy`, as when entropy_coeff != 0), on the same
     token stream: each row is `--prompt` prompt tokens followed by `seq - prompt` response tokens.
Both build the same random Qwen3-shaped model (TransformerConfig from dagrl's HF-config mapping, so the two
differ only in the step), use `--mbs` x `--micro-batches` rows per DP rank per step, and are timed as the
median of `--steps` steps after `--warmup`. With `--rounds R > 1` both models stay resident and the two steps
alternate in R rounds of `--steps` each (rotated order), so that drift of the host (a 1.7B step is partly
launch-bound: its kernels fill ~0.8 of it on an H200) hits both alike; peak memory is then reported above what was
resident before the step. FLOPs use one formula (full attention, LM head on every position);
MFU = achieved FLOP/s per GPU / the same-run matmul peak (and / 989 TFLOP/s, the H100/H200 dense bf16 datasheet).
`--profile DIR` writes one step of each under the torch profiler (kernels, host ops), `--pyprofile DIR` under cProfile
(Python functions by own time: where a host-bound step's time goes).
`--fp8 e4m3 --fp8-recipe blockwise` trains both in FP8 through TransformerEngine (the TransformerConfig's fp8 and
fp8_recipe, which dagrl's actor takes as override_transformer_config.fp8 / fp8_recipe; TE on Hopper has the
delayed, tensorwise and blockwise recipes), so dagrl/bare compares like with like; MFU stays against the bf16
ceilings. `--against FILE` (another run's --json, e.g. the bf16 one) adds each step's speed against that run's.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
from functools import partial
from pathlib import Path

import torch
import torch.distributed as dist
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dagrl.algo.policy_loss import PolicyLossSpec, actor_loss, token_weights
from dagrl.data.batch import Batch
from benchmarks.actor_mfu_timing import matmul_peak_tflops, profile_step, python_profile, rounds_of
from benchmarks.common import random_actor, shared_config_dir
from dagrl.engine.base import MegatronEngineSpec, OptimSpec
from dagrl.placement import ParallelLayout

DATASHEET_TFLOPS = 989.0
FP8_RECIPES = ("delayed", "tensorwise", "blockwise")


def fp8_overrides(fmt: str | None, recipe: str) -> dict:
    """The TransformerConfig fields that train in FP8 through TransformerEngine (none for bf16)."""
    return {"fp8": fmt, "fp8_recipe": recipe} if fmt else {}


def precision(results: dict) -> str:
    fp8 = results.get("fp8")
    return f"FP8 {fp8['fp8']} {fp8['fp8_recipe']}" if fp8 else "bf16"


def against_lines(results: dict, other: dict) -> list[str]:
    """Each step of this run against the same step of `other` (another run's results, e.g. bf16's): the ratio of
    their median step times, > 1 where this run is faster."""
    mine, theirs = precision(results), precision(other)
    return [
        f"{name}: {mine} {results[name]['step_s']:.3f} s/step, {theirs} {other[name]['step_s']:.3f} s/step: "
        f"{mine} at {other[name]['step_s'] / results[name]['step_s']:.3f}x the speed of {theirs}"
        for name in ("bare", "dagrl")
        if name in results and name in other
    ]


def train_flops_per_token(hf_config, seq: int) -> float:
    """Forward FLOPs per token x 3 (backward is twice the forward): QKV, full (non-causal) attention scores and
    values, output projection, the gated MLP, and the LM head on every position."""
    h, heads = hf_config.hidden_size, hf_config.num_attention_heads
    kv, dim = hf_config.num_key_value_heads, getattr(hf_config, "head_dim", None) or h // heads
    ffn, vocab = hf_config.intermediate_size, hf_config.vocab_size
    layer = 2 * h * (heads + 2 * kv) * dim + 2 * 2 * seq * heads * dim + 2 * heads * dim * h + 2 * 3 * h * ffn
    return 3 * (hf_config.num_hidden_layers * layer + 2 * h * vocab)


def token_rows(rows: int, seq: int, vocab: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (rows, seq), generator=generator)


# ---- bare Megatron-Core ------------------------------------------------------------------------


def bare_step_fn(hf_config, tf_config, tokens: torch.Tensor, mbs: int, device: torch.device):
    """A plain GPTModel next-token training step (Megatron's own loss), returned as a closure."""
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig, finalize_model_grads
    from megatron.core.models.gpt import GPTModel
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from dagrl.engine.megatron.hf_config import layer_spec, padded_vocab_size, rope_theta

    on_gpu = device.type == "cuda"
    model = GPTModel(
        config=tf_config,
        transformer_layer_spec=layer_spec(tf_config, on_gpu),
        vocab_size=padded_vocab_size(hf_config.vocab_size, tf_config.tensor_model_parallel_size),
        max_sequence_length=tokens.shape[1],
        pre_process=ps.is_pipeline_first_stage(),
        post_process=ps.is_pipeline_last_stage(),
        position_embedding_type="rope",
        rotary_base=rope_theta(hf_config),
        share_embeddings_and_output_weights=bool(hf_config.tie_word_embeddings),
    ).to(device)
    from megatron.core.transformer.module import Float16Module

    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=on_gpu, use_distributed_optimizer=True, bucket_size=40_000_000
    )
    ddp = DistributedDataParallel(tf_config, ddp_config, Float16Module(tf_config, model))
    if on_gpu:  # what the schedule needs to overlap the grad reduction with backward
        tf_config.no_sync_func = ddp.no_sync
        tf_config.grad_sync_func = ddp.start_grad_sync
    tf_config.finalize_model_grads_func = finalize_model_grads
    optimizer = get_megatron_optimizer(
        OptimizerConfig(
            optimizer="adam",
            lr=1e-6,
            bf16=True,
            params_dtype=torch.bfloat16,
            use_distributed_optimizer=True,
            clip_grad=1.0,
        ),
        [ddp],
    )
    seq = tokens.shape[1] - 1  # tokens carry one extra column: the last position's label
    inputs = tokens[:, :-1].contiguous().to(device)
    labels = tokens[:, 1:].contiguous().to(device)
    position_ids = torch.arange(seq, device=device).unsqueeze(0).expand(mbs, -1)

    def forward_step(data_iterator, module):
        start = next(data_iterator)
        loss = module(inputs[start : start + mbs], position_ids, None, labels=labels[start : start + mbs])

        def loss_func(output):
            mean = output.float().mean()
            return mean, {"loss": mean.detach()}

        return loss, loss_func

    def step():
        ddp.zero_grad_buffer()
        optimizer.zero_grad()
        starts = list(range(0, inputs.shape[0], mbs))
        get_forward_backward_func()(
            forward_step_func=forward_step,
            data_iterator=iter(starts),
            model=[ddp],
            num_microbatches=len(starts),
            seq_length=seq,
            micro_batch_size=mbs,
            forward_only=False,
        )
        optimizer.step()

    def release():
        tf_config.no_sync_func = tf_config.grad_sync_func = None

    return step, release


# ---- dagrl ---------------------------------------------------------------------------------------


def ppo_batch(tokens: torch.Tensor, prompt: int, dp_size: int, seed: int) -> Batch:
    """Full-length rows in dagrl's rollout layout with the PPO loss columns (old log-probs, advantages, weights)."""
    rows, seq = tokens.shape
    response = seq - prompt
    generator = torch.Generator().manual_seed(seed)
    mask = torch.ones(rows, response, dtype=torch.long)
    return Batch(
        {
            "input_ids": tokens,
            "attention_mask": torch.ones_like(tokens),
            "position_ids": torch.arange(seq).unsqueeze(0).expand(rows, -1).contiguous(),
            "responses": tokens[:, prompt:].contiguous(),
            "response_mask": mask,
            "old_log_probs": -10 - torch.rand(rows, response, generator=generator),
            "advantages": torch.randn(rows, 1, generator=generator).expand(-1, response).contiguous(),
            "token_weights": token_weights(mask, "token-mean", float(mask.sum()) * dp_size),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1.7b", help="a dagrl.plan.presets Qwen3 size (tiny, 1.7b, 8b, ...)")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--sp", action="store_true")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--prompt", type=int, default=1024, help="prompt tokens of each dagrl row")
    parser.add_argument("--mbs", type=int, default=1)
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="timed steps of each path per round")
    parser.add_argument(
        "--rounds", type=int, default=1, help="> 1: both models resident, their steps alternating in this many rounds"
    )
    parser.add_argument("--only", choices=["bare", "dagrl"], default=None)
    parser.add_argument("--json", default=None, help="also write the results here (rank 0)")
    parser.add_argument("--profile", default=None, help="also profile one step of each; kernel tables go here")
    parser.add_argument("--pyprofile", default=None, help="also cProfile one step of each; tables go here")
    parser.add_argument("--entropy", action="store_true", help="dagrl computes the entropy too (entropy_coeff != 0)")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a TransformerConfig field for dagrl's engine (override_transformer_config), repeatable",
    )
    parser.add_argument("--fp8", choices=("e4m3", "hybrid"), default=None, help="both steps in FP8 (TE)")
    parser.add_argument("--fp8-recipe", choices=FP8_RECIPES, default="blockwise")
    parser.add_argument("--against", default=None, help="another run's --json: print each step's speed against it")
    args = parser.parse_args()
    malformed = [item for item in args.override if "=" not in item]
    if malformed:
        parser.error(f"--override {malformed[0]}: expected KEY=VALUE, e.g. apply_rope_fusion=false")
    overrides = {key: yaml.safe_load(value) for key, value in (item.split("=", 1) for item in args.override)}
    fp8 = fp8_overrides(args.fp8, args.fp8_recipe)
    if set(fp8) & set(overrides):
        parser.error("--override fp8/fp8_recipe: use --fp8 and --fp8-recipe, which set both steps alike")

    from dagrl.engine.megatron.hf_config import transformer_config
    from dagrl.engine.megatron.parallel import init_model_parallel, local_device
    from dagrl.plan.presets import hf_config as preset_config

    layout = ParallelLayout(tensor_model_parallel_size=args.tp, sequence_parallel=args.sp)
    init_model_parallel(layout, seed=1234)
    device = local_device()
    hf = preset_config("qwen3", args.size)
    model_dir = shared_config_dir(hf, "actor_mfu_")
    from megatron.core import parallel_state as ps

    dp_size, dp_rank = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
    rows = args.mbs * args.micro_batches
    tokens = token_rows(rows, args.seq + 1, hf.vocab_size, seed=dp_rank)  # TP ranks share rows, DP ranks differ
    peak = matmul_peak_tflops()
    flops_per_step = train_flops_per_token(hf, args.seq) * rows * args.seq  # per DP rank = per model replica
    gpus_per_replica = dist.get_world_size() // dp_size
    results = {
        "size": args.size,
        "layout": f"TP{args.tp}{'+SP' if args.sp else ''} DP{dp_size}",
        "rounds": args.rounds,
        "seq": args.seq,
        "rows_per_dp_rank": rows,
        "matmul_tflops": peak,
        "dagrl_overrides": overrides,
        "fp8": fp8,
    }

    def record(name: str, times: list[float], peak_gib: float) -> None:
        seconds = statistics.median(times)
        tflops = flops_per_step / gpus_per_replica / seconds / 1e12
        results[name] = {
            "step_s": seconds,
            "steps_s": times,
            "tokens_per_s_per_gpu": rows * args.seq / gpus_per_replica / seconds,
            "tflops_per_gpu": tflops,
            "mfu": tflops / peak,
            "mfu_datasheet": tflops / DATASHEET_TFLOPS,
            "peak_gib": peak_gib,
        }

    def measure(steps: dict) -> None:
        if not steps:
            return
        for name, (times, peak_gib) in rounds_of(steps, args.warmup, args.steps, args.rounds).items():
            record(name, times, peak_gib)
        for name, step in steps.items():
            if args.profile:
                profile_step(step, name, args.profile)
            if args.pyprofile:
                python_profile(step, name, args.pyprofile)

    steps, releases = {}, []
    if args.only in (None, "bare"):
        tf_config = transformer_config(hf, layout, torch.bfloat16, on_gpu=device.type == "cuda", overrides=fp8)
        steps["bare"], release = bare_step_fn(hf, tf_config, tokens, args.mbs, device)
        releases.append(release)
        if args.rounds == 1:  # one at a time: bare is measured and freed before dagrl's model is built
            measure({"bare": steps.pop("bare")})
            release()
            releases.clear()
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    if args.only in (None, "dagrl"):
        engine = random_actor(
            MegatronEngineSpec(
                model_path=model_dir,
                layout=layout,
                param_dtype=torch.bfloat16,
                use_distributed_optimizer=True,
                optim=OptimSpec(lr=1e-6, total_training_steps=100),
                override_transformer_config={**overrides, **fp8},
            )
        )
        batch = ppo_batch(tokens[:, : args.seq], args.prompt, dp_size, seed=dp_rank)
        loss_fn = partial(actor_loss, spec=PolicyLossSpec(entropy_coeff=1e-3 if args.entropy else 0.0))

        def update() -> None:
            engine.train_step(batch, loss_fn, args.mbs, 1.0, with_entropy=args.entropy)

        steps["dagrl"] = update
    measure(steps)
    for release in releases:
        release()
    if "bare" in results and "dagrl" in results:
        results["dagrl_over_bare"] = results["bare"]["step_s"] / results["dagrl"]["step_s"]
    if dist.get_rank() == 0:
        print_table(results)
        if args.against:
            print("\n".join(against_lines(results, json.loads(Path(args.against).read_text()))))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    dist.barrier()
    dist.destroy_process_group()


def print_table(results: dict) -> None:
    print(
        f"\nQwen3-{results['size']} shape, {results['layout']}, seq {results['seq']}, "
        f"{results['rows_per_dp_rank']} rows per DP rank; bf16 matmul peak {results['matmul_tflops']:.0f} TFLOP/s"
        + (f"; both in FP8 {results['fp8']['fp8']}, {results['fp8']['fp8_recipe']} recipe" if results["fp8"] else "")
        + (f"; dagrl with {results['dagrl_overrides']}" if results["dagrl_overrides"] else "")
        + (f"; {results['rounds']} alternating rounds" if results["rounds"] > 1 else "")
    )
    peak = "peak GiB above the resident" if results["rounds"] > 1 else "peak GiB"
    print(
        f"| step | s/step (median) | min-max s | tokens/s/GPU | TFLOP/s/GPU | MFU (same-run peak) | "
        f"MFU (989 datasheet) | {peak} |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in ("bare", "dagrl"):
        if name in results:
            r = results[name]
            print(
                f"| {name} | {r['step_s']:.3f} | {min(r['steps_s']):.3f}-{max(r['steps_s']):.3f} | "
                f"{r['tokens_per_s_per_gpu']:.0f} | {r['tflops_per_gpu']:.0f} | "
                f"{r['mfu']:.3f} | {r['mfu_datasheet']:.3f} | {r['peak_gib']:.1f} |"
            )
    if "dagrl_over_bare" in results:
        print(f"dagrl / bare speed: {results['dagrl_over_bare']:.3f}")


if __name__ == "__main__":
    main()
