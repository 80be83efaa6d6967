"""Asynchronous training against the plain colocated loop, on the same model, data, seeds, steps and processes.

usage: python3 benchmarks/async_pipeline.py --model DIR --data DIR [--steps 8] [--response-length 1024]
           [--batch 32] [--n 8] [--oversample 2.0] [--staleness 1] [--rollout vllm] [--nproc 1]
           [--pools 0,1,2] [--rollout-procs 1] [--out DIR] [-- extra dotted overrides for every run]

Runs `dagrl.main_dag` on `--nproc` processes: the baseline (colocated, async_training.partial_rollout=false), then
colocated partial rollout with `--oversample` and `--staleness`, then for each K in `--pools` separate pools
(actor_rollout_ref.hybrid_engine=false: `--rollout-procs` rollout processes, the rest train) with max_staleness=K,
and prints one table: mean step and generation seconds, trained response tokens per second, the generation share
of the step, response lengths, the async/* metrics and each pool's idle share (rollout: waiting for weights;
trainer: waiting for a batch), over every step (partial rollout fills its pool in step 1 and trains on it later;
what its pool still holds at the end is not counted). Beside each two-pool run: the step time the discrete-event
model (benchmarks/async_model.py) predicts from the rates the baseline measured (lengths fixed at the measured
mean, one sequence's speed set so that a batch generates in the measured time), so the model is checked where it
can be.
The workload's long tail is the model's
own: with a response limit well above the typical answer, a few samples ramble to the limit while the rest stop
early, and a plain step waits for the longest.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def run(name: str, args: argparse.Namespace, extra: list[str], pools: list[str] = ()) -> tuple[list[dict], float]:
    out = Path(args.out) / name
    overrides = [
        f"actor_rollout_ref.model.path={args.model}", f"data.train_files={args.data}/train.parquet",
        "data.val_files=null", f"data.train_batch_size={args.batch}", "data.max_prompt_length=128",
        f"data.max_response_length={args.response_length}", f"actor_rollout_ref.rollout.n={args.n}",
        f"actor_rollout_ref.rollout.name={args.rollout}", f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={max(1, min(16, args.batch * args.n // args.nproc))}",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={4 * (128 + args.response_length)}",
        f"trainer.total_training_steps={args.steps}", "trainer.save_freq=-1", "trainer.test_freq=-1",
        "trainer.val_before_train=false", "trainer.logger=[console,jsonl]", f"trainer.default_local_dir={out}",
        f"trainer.n_gpus_per_node={args.nproc}", "trainer.resume_mode=disable",
    ]
    if name == "partial":
        overrides += ["async_training.partial_rollout=true", f"async_training.oversample_ratio={args.oversample}",
                      f"async_training.max_staleness={args.staleness}"]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc), "-m",
               "dagrl.main_dag", *overrides, *pools, *extra]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{name} run failed ({done.returncode}):\n{done.stderr[-4000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [row for row in rows if row.get("step", 0) >= 1], wall


def summary(rows: list[dict], args: argparse.Namespace) -> dict[str, float]:
    steady = rows  # every step: partial rollout's pool fill in step 1 is work its later steps train on
    mean = lambda key: sum(row.get(key, 0.0) for row in steady) / len(steady)  # noqa: E731
    seconds = sum(row["timing_s/step"] for row in steady)
    tokens = sum(row["response_length/mean"] * args.batch * args.n for row in steady)
    return {"step_s": mean("timing_s/step"), "gen_s": mean("timing_s/gen"), "tok_per_s": tokens / seconds,
            "gen_share": sum(row["timing_s/gen"] for row in steady) / seconds,
            "resp_mean": mean("response_length/mean"), "resp_max": mean("response_length/max"),
            "clip": mean("response_length/clip_ratio"), "stale": mean("async/staleness_mean"),
            "partial": mean("async/partial_fraction"), "prompt": mean("prompt_length/mean"),
            "roll_idle": sum(row.get("timing_s/rollout_pause", 0.0) for row in steady) / seconds,
            "train_idle": sum(row.get("timing_s/trainer_wait", 0.0) for row in steady) / seconds,
            "push_s": mean("timing_s/weight_push")}


def predicted_step(base: dict[str, float], args: argparse.Namespace, staleness: int) -> float:
    """The model's step time of two pools (--rollout-procs + the rest) from the baseline's measured rates."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import numpy as np
    from async_model import Rates, Workload, two_pools

    responses = args.batch * args.n
    train_s = max(base["step_s"] - base["gen_s"], 1e-6)
    rates = Rates(decode_tok_s=1e12, seq_tok_s=base["resp_mean"] / base["gen_s"], prefill_tok_s=1e12,
                  train_tok_s=(base["prompt"] + base["resp_mean"]) * responses / (train_s * args.nproc),
                  push_s=base.get("push_s", 0.0))
    lengths = lambda rng, count: np.full(count, base["resp_mean"])  # noqa: E731
    work = Workload(batch=args.batch, n=args.n, prompt_len=int(base["prompt"]), lengths=lengths)
    return two_pools(work, rates, args.rollout_procs, args.nproc - args.rollout_procs, staleness,
                     steps=args.steps).step_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True, help="directory with train.parquet")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--response-length", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--oversample", type=float, default=2.0)
    parser.add_argument("--staleness", type=int, default=1)
    parser.add_argument("--rollout", default="vllm")
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--pools", default="", help="max_staleness values of two-pool runs, e.g. 0,1,2 (none: skip)")
    parser.add_argument("--rollout-procs", type=int, default=1, help="processes of the rollout pool")
    parser.add_argument("--out", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "dagrl_async_bench"))
    args, extra = parser.parse_known_args()
    extra = [arg for arg in extra if arg != "--"]
    results, predicted = {}, {}
    runs = [("plain", []), ("partial", [])]
    for staleness in [int(k) for k in args.pools.split(",") if k != ""]:
        runs.append((f"pools K={staleness}", [
            "actor_rollout_ref.hybrid_engine=false", f"rollout.n_gpus_per_node={args.rollout_procs}",
            f"trainer.n_gpus_per_node={args.nproc - args.rollout_procs}", f"async_training.max_staleness={staleness}"]))
    for name, pools in runs:
        rows, wall = run(name.replace(" ", "_").replace("=", ""), args, extra, pools)
        results[name] = summary(rows, args)
        results[name]["wall_s"] = wall
        if pools:
            predicted[name] = predicted_step({**results["plain"], "push_s": results[name]["push_s"]}, args,
                                             int(name.rpartition("=")[2]))
    columns = ["step_s", "gen_s", "gen_share", "tok_per_s", "resp_mean", "resp_max", "clip", "stale", "partial",
               "roll_idle", "train_idle", "wall_s"]
    print(f"steps 1..{args.steps}, {args.batch} prompts x {args.n}, response limit {args.response_length}, "
          f"{args.nproc} processes (pools: {args.rollout_procs} rollout + {args.nproc - args.rollout_procs} train); "
          f"partial: oversample {args.oversample}, max_staleness {args.staleness}")
    print("| run | " + " | ".join(columns) + " | model step_s |")
    print("|---" * (len(columns) + 2) + "|")
    for name, values in results.items():
        model = f"{predicted[name]:.3f}" if name in predicted else "-"
        print(f"| {name} | " + " | ".join(f"{values[c]:.3f}" for c in columns) + f" | {model} |")
    for name in results:
        if name != "plain":
            print(f"trained tokens/s, {name} / plain: {results[name]['tok_per_s'] / results['plain']['tok_per_s']:.3f}x")


if __name__ == "__main__":
    main()
