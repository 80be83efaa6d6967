"""Asynchronous training against the plain colocated loop, on the same model, data, seeds, steps and processes.

usage: python3 benchmarks/async_pipeline.py --model DIR --data DIR [--steps 8] [--response-length 1024]
           [--batch 32] [--n 8] [--oversample 2.0] [--staleness 1] [--rollout vllm] [--nproc 1]
           [--runs plain,partial,pools0,pools1,pools1p] [--rollout-procs 1] [--long-tail MEAN,MAX] [--report]
           [--out DIR] [-- extra dotted overrides for every run]

Runs `dagrl.main_dag` on `--nproc` processes, once per name in `--runs`: `plain` (colocated, the baseline),
`partial` (colocated partial rollout with `--oversample` and `--staleness`), `poolsK` (separate pools,
actor_rollout_ref.hybrid_engine=false: `--rollout-procs` rollout processes, the rest train, max_staleness=K) and
`poolsKp` (the same with partial rollout). `--report` runs nothing and prints the table of the runs already in
`--out` (so each run can be its own command on a machine that limits a command's time). One table: mean step and
generation seconds, trained response tokens per second (in all and per process), the generation share of the step,
response lengths, the async/* metrics, each pool's idle share (rollout: waiting for weights; trainer: waiting for a
batch) and the weight push, over every step (partial rollout fills its pool in step 1 and trains on it later; what
its pool still holds at the end is not counted). Beside each other run: the step time the discrete-event model
(benchmarks/async_model.py) predicts from the rates `plain` measured (training tokens/s; the colocated
choreography's seconds, `timing_s/rollout_switch`, which two pools do not pay; one sequence's speed from the longest
response and the generation time without them; the full-batch decode rate fitted so that the model's colocated step
is the measured one), with the responses' lengths at the measured mean, or drawn per prompt from the long-tailed
distribution of `--long-tail` (the one benchmarks/long_tail_data.py gave the data), so the model is checked where
it can be.
Without per-prompt limits the workload's long tail is the model's own: with a response limit well above the
typical answer, a few samples ramble to the limit while the rest stop early, and a plain step waits for the longest.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def overrides_of(name: str, args: argparse.Namespace) -> list[str]:
    """The dotted overrides that make run `name` (plain, partial, poolsK, poolsKp) what it is."""
    partial = ["async_training.partial_rollout=true", f"async_training.oversample_ratio={args.oversample}"]
    if name == "plain":
        return []
    if name == "partial":
        return [*partial, f"async_training.max_staleness={args.staleness}"]
    if name.startswith("pools") and name[5:].rstrip("p").isdigit():
        return ["actor_rollout_ref.hybrid_engine=false", f"rollout.n_gpus_per_node={args.rollout_procs}",
                f"trainer.n_gpus_per_node={args.nproc - args.rollout_procs}",
                f"async_training.max_staleness={int(name[5:].rstrip('p'))}", *(partial if name.endswith("p") else [])]
    raise SystemExit(f"--runs: unknown run {name!r}; use plain, partial, poolsK or poolsKp (K an integer)")


def run(name: str, args: argparse.Namespace, extra: list[str]) -> float:
    """Run `name` into --out/name; its wall seconds."""
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
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc), "-m",
               "dagrl.main_dag", *overrides, *overrides_of(name, args), *extra]
    start = time.perf_counter()
    with open(Path(args.out) / f"{name}.log", "w") as log:
        done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        tail = (Path(args.out) / f"{name}.log").read_text()[-4000:]
        raise SystemExit(f"{name} run failed ({done.returncode}):\n{tail}")
    (out / "wall_s").write_text(f"{wall:.1f}")
    return wall


def rows_of(name: str, args: argparse.Namespace) -> list[dict] | None:
    path = Path(args.out) / name / "metrics.jsonl"
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [row for row in rows if row.get("step", 0) >= args.first_step]


def summary(rows: list[dict], args: argparse.Namespace) -> dict[str, float]:
    steady = rows  # every step: partial rollout's pool fill in step 1 is work its later steps train on
    mean = lambda key: sum(row.get(key, 0.0) for row in steady) / len(steady)  # noqa: E731
    # a scored batch: generation and the rule scorer. Runs before the rollout node waited for the slowest rank
    # (timing_s/gen_rank_spread) logged that wait as the scorer's (its all-reduce), each a mean over ranks
    produce = lambda row: row["timing_s/gen"] + row.get("timing_s/reward", 0.0)  # noqa: E731
    seconds = sum(row["timing_s/step"] for row in steady)
    tokens = sum(row["response_length/mean"] * args.batch * args.n for row in steady)
    return {"step_s": mean("timing_s/step"), "gen_s": sum(map(produce, steady)) / len(steady),
            "tok_per_s": tokens / seconds, "gen_share": sum(map(produce, steady)) / seconds,
            "resp_mean": mean("response_length/mean"), "resp_max": mean("response_length/max"),
            "clip": mean("response_length/clip_ratio"), "stale": mean("async/staleness_mean"),
            "partial": mean("async/partial_fraction"), "prompt": mean("prompt_length/mean"),
            "roll_idle": sum(row.get("timing_s/rollout_pause", 0.0) for row in steady) / seconds,
            "train_idle": sum(row.get("timing_s/trainer_wait", 0.0) for row in steady) / seconds,
            "push_s": mean("timing_s/weight_push"), "push_gb": mean("async/push_gb"),
            "switch_s": mean("timing_s/rollout_switch"), "restarted": mean("async/restarted_groups"),
            # the training side's own seconds a step: colocated, what is not producing a batch; two pools, what is
            # not waiting for a batch (steps from 2: step 1 of two pools includes start-up work)
            "train_s": sum(row["timing_s/step"] - row.get("timing_s/trainer_wait", produce(row))
                           for row in rows[1:] or rows) / len(rows[1:] or rows),
            "tok_per_gpu_s": tokens / seconds / args.nproc}


def predicted_step(base: dict[str, float], args: argparse.Namespace, name: str,
                   pool_train_s: float | None = None) -> tuple[float, float]:
    """The model's step time of run `name` from the rates `plain` measured (see the module docstring). With
    `pool_train_s`, the training pool's seconds a step as run `name` measured them: training then runs at that pool's
    own rate instead of plain's rate scaled by GPU count (a small model's training does not scale: fixed costs).
    Returns the model's step seconds, and its trained tokens/s over the model's plain run's."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import numpy as np
    from async_model import Rates, Workload, colocated, long_tail_lengths, two_pools

    responses = args.batch * args.n
    train_s = max(base["step_s"] - base["gen_s"], 1e-6)
    if args.long_tail:
        mean, longest = (float(v) for v in args.long_tail.split(","))
        lengths = lambda rng, count: np.repeat(long_tail_lengths(rng, count // args.n, mean, int(longest)),  # noqa
                                               args.n)
    else:
        lengths = lambda rng, count: np.full(count, base["resp_mean"])  # noqa: E731
    work = Workload(batch=args.batch, n=args.n, prompt_len=int(base["prompt"]), lengths=lengths)

    decoding_s = max(base["gen_s"] - base["switch_s"], 1e-6)  # generation without the colocated choreography

    def rates(decode: float) -> Rates:
        return Rates(decode_tok_s=decode, seq_tok_s=base["resp_max"] / decoding_s, prefill_tok_s=1e12,
                     train_tok_s=(base["prompt"] + base["resp_mean"]) * responses / (train_s * args.nproc),
                     push_s=base.get("push_s", 0.0), switch_s=base["switch_s"])

    lo, hi = base["resp_max"] / decoding_s, 1e9  # fit the decode rate: the model's plain step = the measured
    for _ in range(40):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if colocated(work, rates(mid), args.nproc, steps=args.steps).step_s > base["step_s"] \
            else (lo, mid)
    fitted = rates(hi)
    plain = colocated(work, fitted, args.nproc, steps=args.steps).tokens_per_gpu_s
    partial = name.endswith("p") or name == "partial"
    if pool_train_s is not None and name.startswith("pools"):
        pool_tokens = (base["prompt"] + base["resp_mean"]) * responses
        fitted.train_tok_s = pool_tokens / (pool_train_s * (args.nproc - args.rollout_procs))
    if name == "partial":
        result = colocated(work, fitted, args.nproc, args.steps, partial=True, oversample=args.oversample,
                           staleness=args.staleness)
    else:
        result = two_pools(work, fitted, args.rollout_procs, args.nproc - args.rollout_procs, int(name[5:].rstrip("p")),
                           steps=args.steps, partial=partial, oversample=args.oversample, restarts=True)
    return result.step_s, result.tokens_per_gpu_s / plain


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
    parser.add_argument("--runs", default="plain,partial", help="comma list of plain, partial, poolsK, poolsKp")
    parser.add_argument("--rollout-procs", type=int, default=1, help="processes of the rollout pool")
    parser.add_argument("--long-tail", default="", help="MEAN,MAX of the data's per-prompt limits, for the model")
    parser.add_argument("--report", action="store_true", help="run nothing: the table of the runs in --out")
    parser.add_argument("--first-step", type=int, default=1,
                        help="count steps from this one (2: leave out step 1's one-time costs, e.g. the first wake-up)")
    parser.add_argument("--out", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "dagrl_async_bench"))
    args, extra = parser.parse_known_args()
    extra = [arg for arg in extra if arg != "--"]
    names = [name for name in args.runs.split(",") if name]
    for name in names:
        overrides_of(name, args)  # every name is known before the first run starts
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if not args.report:
        for name in names:
            run(name, args, extra)
    results = {}
    for name in names:
        rows = rows_of(name, args)
        if rows:
            results[name] = summary(rows, args)
            wall = Path(args.out) / name / "wall_s"
            results[name]["wall_s"] = float(wall.read_text()) if wall.exists() else float("nan")
    # every other named run gets the model's step, measured or not yet (then its row shows the prediction only)
    predicted, own = {}, {}
    for name in names:
        if name != "plain" and "plain" in results:
            base = {**results["plain"], "push_s": results.get(name, {}).get("push_s", 0.0)}
            predicted[name] = predicted_step(base, args, name)
            if name.startswith("pools") and name in results:
                own[name] = predicted_step(base, args, name, pool_train_s=results[name]["train_s"])
    columns = ["step_s", "gen_s", "train_s", "gen_share", "tok_per_s", "tok_per_gpu_s", "resp_mean", "resp_max", "clip", "stale",
               "partial", "restarted", "roll_idle", "train_idle", "push_s", "push_gb", "wall_s"]
    print(f"steps {args.first_step}..{args.steps}, {args.batch} prompts x {args.n}, response limit {args.response_length}, "
          f"{args.nproc} processes (pools: {args.rollout_procs} rollout + {args.nproc - args.rollout_procs} train); "
          f"partial: oversample {args.oversample}, colocated max_staleness {args.staleness}"
          + (f"; per-prompt limits long-tailed, mean {args.long_tail.replace(',', ', max ')}" if args.long_tail else ""))
    print("model step_s: from plain's rates, training scaled by GPU count; model' step_s: the same with the training "
          "pool's own measured seconds a step (train_s)")
    print("| run | " + " | ".join(columns) + " | model step_s | model' step_s |")
    print("|---" * (len(columns) + 3) + "|")
    fmt = lambda table, name: f"{table[name][0]:.3f}" if name in table else "-"  # noqa: E731
    for name in names:
        cells = [f"{results[name][c]:.3f}" if name in results else "-" for c in columns]
        print(f"| {name} | " + " | ".join(cells) + f" | {fmt(predicted, name)} | {fmt(own, name)} |")
    for name in results:
        if name != "plain" and "plain" in results:
            measured = results["plain"]["step_s"] / results[name]["step_s"]
            tokens = results[name]['tok_per_s'] / results['plain']['tok_per_s']
            model_own = f", model' {own[name][1]:.3f}x" if name in own else ""
            print(f"{name} / plain: trained tokens/s {tokens:.3f}x (model {predicted[name][1]:.3f}x{model_own}), step "
                  f"time {measured:.3f}x (model {results['plain']['step_s'] / predicted[name][0]:.3f}x)")


if __name__ == "__main__":
    main()
