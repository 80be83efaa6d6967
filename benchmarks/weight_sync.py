"""Seconds and GB/s of dagrl's actor -> vLLM weight sync against the bound measured in the same run.

usage (GPU machine, megatron-core + vLLM): torchrun --nproc-per-node 2 benchmarks/weight_sync.py --size 8b --tp 2

A random Qwen3-shaped actor (Megatron, bf16, frozen, TP=--tp) and a vLLM engine (dummy weights, the same TP) share
the GPUs, as in training. The sync is what the rollout node runs: `actor.export_weights(bucket)` (TP all-gather,
QKV/fc1 split back to HF tensors, buckets of --bucket-mb) streamed into vLLM. It is timed twice: through vLLM's
own `load_weights` for every tensor, and replaying the copies the first sync recorded (the default,
dagrl/engine/rollout/load_plan.py). The bound is the data movement it cannot avoid, timed here: an NCCL all-gather
of this rank's parameter shards (every rank ends with the full model) plus one device copy of the full model's
bytes. Median of --repeats after one warm-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import cpu_profile, random_actor, shared_config_dir
from dagrl.engine.base import MegatronEngineSpec
from dagrl.placement import ParallelLayout


def timed(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="1.7b")
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--bucket-mb", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    parser.add_argument("--profile", action="store_true", help="also print where one sync spends CPU time (rank 0)")
    args = parser.parse_args()

    from megatron.core import parallel_state as ps
    from transformers import AutoModelForCausalLM

    from dagrl.engine.megatron.parallel import init_distributed
    from dagrl.engine.rollout.vllm import VLLMRollout, VLLMRolloutSpec
    from dagrl.engine.rollout.weight_manifest import WeightManifest
    from dagrl.plan.presets import hf_config

    config = hf_config("qwen3", args.size)
    config.architectures = ["Qwen3ForCausalLM"]  # vLLM picks its model class from it
    layout = ParallelLayout(tensor_model_parallel_size=args.tp)
    init_distributed()
    model_dir = shared_config_dir(config, "weight_sync_")
    with torch.device("meta"):  # the config-only model dir has no safetensors to read the manifest from
        shapes = {n: tuple(t.shape) for n, t in AutoModelForCausalLM.from_config(config).state_dict().items()}
    actor = random_actor(MegatronEngineSpec(model_path=model_dir, layout=layout, param_dtype=torch.bfloat16))
    rollout = VLLMRollout(
        VLLMRolloutSpec(
            model_path=model_dir,
            tensor_parallel_size=args.tp,
            gpu_memory_utilization=0.3,
            load_format="dummy",
            max_model_len=1024,
            free_cache_engine=False,
        ),
        eos_token_ids=[0],
        pad_token_id=0,
        manifest=WeightManifest(model_dir, shapes),
    )

    shards = torch.cat([p.detach().reshape(-1) for m in actor.modules for p in m.parameters()])
    tp_group = ps.get_tensor_model_parallel_group()
    gathered = torch.empty(shards.numel() * args.tp, dtype=shards.dtype, device=shards.device)
    full_bytes = sum(t.numel() * t.element_size() for b in actor.export_weights(1 << 40) for _, t in b)
    source = torch.empty(full_bytes, dtype=torch.uint8, device=shards.device)
    target = torch.empty_like(source)
    gather_s = timed(lambda: dist.all_gather_into_tensor(gathered, shards, group=tp_group), args.repeats)
    copy_s = timed(lambda: target.copy_(source), args.repeats)
    gathered = source = target = None  # free them before the sync runs
    rows = []
    plan = rollout.load_plan
    for bucket_mb in args.bucket_mb:
        bucket = bucket_mb << 20
        export_s = timed(lambda: [None for _ in actor.export_weights(bucket)], args.repeats)
        rollout.load_plan = None  # vLLM's own load_weights for every tensor
        loader_s = timed(lambda: rollout.load_weights(actor.export_weights(bucket)), args.repeats)
        rollout.load_plan = plan  # recorded copies (its first sync, the warm-up, records)
        sync_s = timed(lambda: rollout.load_weights(actor.export_weights(bucket)), args.repeats)
        rows.append({"bucket_mb": bucket_mb, "export_s": export_s, "loader_sync_s": loader_s, "sync_s": sync_s})
    if args.profile:  # the sync is bound by Python work, not by the GPU: see which
        table = cpu_profile(lambda: rollout.load_weights(actor.export_weights(args.bucket_mb[-1] << 20)), "tottime", 25)
        if dist.get_rank() == 0:
            print(table, flush=True)
    result = {
        "size": args.size,
        "tp": args.tp,
        "gb": full_bytes / 1e9,
        "all_gather_s": gather_s,
        "copy_s": copy_s,
        "bound_s": gather_s + copy_s,
        "rows": rows,
    }
    if dist.get_rank() == 0:
        print(
            f"\nQwen3-{args.size} shape, bf16, actor TP{args.tp} -> vLLM TP{args.tp}: {result['gb']:.2f} GB; bound "
            f"{result['bound_s'] * 1e3:.1f} ms = all-gather {gather_s * 1e3:.1f} ms + copy {copy_s * 1e3:.1f} ms"
        )
        print(plan.summary())
        print(
            "| bucket MB | export only s | sync s, vLLM loader | sync s, replayed copies | GB/s | sync / bound |\n"
            "|---|---|---|---|---|---|"
        )
        for row in rows:
            print(
                f"| {row['bucket_mb']} | {row['export_s']:.3f} | {row['loader_sync_s']:.3f} | {row['sync_s']:.3f} | "
                f"{result['gb'] / row['sync_s']:.0f} | {row['sync_s'] / result['bound_s']:.2f} |"
            )
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
    dist.barrier()


if __name__ == "__main__":
    main()
