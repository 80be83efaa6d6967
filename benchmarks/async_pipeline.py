"""Asynchronous training against the plain colocated loop, on the same model, data, seeds, steps and processes.

usage: python3 benchmarks/async_pipeline.py --model DIR --data DIR [--steps 8] [--response-length 1024]
           [--batch 32] [--n 8] [--oversample 2.0] [--staleness 1] [--rollout vllm] [--nproc 1]
           [--runs plain,partial,pools0,pools1,pools1p] [--rollout-procs 1] [--long-tail MEAN,MAX[,ROWS]] [--report]
           [--out DIR] [-- extra dotted overrides for every run]

Runs `dagrl.main_dag` on `--nproc` processes, once per name in `--runs`: `plain` (colocated, the baseline),
`partial` (colocated partial rollout with `--oversample` and `--staleness`), `poolsK` (separate pools,
actor_rollout_ref.hybrid_engine=false: `--rollout-procs` rollout processes, the rest train, max_staleness=K) and
`poolsKp` (the same with partial rollout). `--report` runs nothing and prints the table of the runs already in
`--out` (so each run can be its own command on a machine that limits a command's time). One table: mean step and
generation seconds, trained response tokens per second (in all and per process), the generation share of the step,
response lengths, the async/* metrics, each pool's idle share (rollout: waiting for weights; trainer: waiting for a
batch) and the weight push, over every step (partial rollout fills its pool in step 1 and trains on it later; what
its pool still holds at the end is not counted). Beside each other run: what the discrete-event model
(benchmarks/async_model.py) predicts from the `plain` run alone (benchmarks/async_fit.py: the decode iteration's
fixed and per-sequence seconds, least squares over plain's steps from 2; training tokens/s; the colocated
choreography's seconds, `timing_s/rollout_switch`, which two pools do not pay; step 1's one-time extras), the same
rates for every run: its step time, and over the counted steps its trained response tokens/s and step time against
its own plain run and its mean trained response. The lengths are the run's own where `--long-tail MEAN,MAX[,ROWS]`
lets them be rebuilt (benchmarks/long_tail_data.py's seeded limits over ROWS rows, else the count plain.log names,
in the trainer's sampler order; used only if they give each plain step's measured longest response), else drawn
from that distribution per prompt, else the measured mean, so the model is checked where it can be.
Without per-prompt limits the workload's long tail is the model's own: with a response limit well above the
typical answer, a few samples ramble to the limit while the rest stop early, and a plain step waits for the longest.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path


def overrides_of(name: str, args: argparse.Namespace) -> list[str]:
    """The dotted overrides that make run `name` (plain, partial, poolsK, poolsKp) what it is."""
    partial = [
        "async_training.partial_rollout=true",
        f"async_training.oversample_ratio={args.oversample}",
        *(["async_training.restart_stale=false"] if args.keep_stale else []),
    ]
    if name == "plain":
        return []
    if name == "partial":
        return [*partial, f"async_training.max_staleness={args.staleness}"]
    if name.startswith("pools") and name[5:].rstrip("p").isdigit():
        return [
            "actor_rollout_ref.hybrid_engine=false",
            f"rollout.n_gpus_per_node={args.rollout_procs}",
            f"trainer.n_gpus_per_node={args.nproc - args.rollout_procs}",
            f"async_training.max_staleness={int(name[5:].rstrip('p'))}",
            *(partial if name.endswith("p") else []),
        ]
    raise SystemExit(f"--runs: unknown run {name!r}; use plain, partial, poolsK or poolsKp (K an integer)")


def run(name: str, args: argparse.Namespace, extra: list[str]) -> float:
    """Run `name` into --out/name; its wall seconds."""
    out = Path(args.out) / name
    overrides = [
        f"actor_rollout_ref.model.path={args.model}",
        f"data.train_files={args.data}/train.parquet",
        "data.val_files=null",
        f"data.train_batch_size={args.batch}",
        "data.max_prompt_length=128",
        f"data.max_response_length={args.response_length}",
        f"actor_rollout_ref.rollout.n={args.n}",
        f"actor_rollout_ref.rollout.name={args.rollout}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={max(1, min(16, args.batch * args.n // args.nproc))}",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={4 * (128 + args.response_length)}",
        f"trainer.total_training_steps={args.steps}",
        "trainer.save_freq=-1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.logger=[console,jsonl]",
        f"trainer.default_local_dir={out}",
        f"trainer.n_gpus_per_node={args.nproc}",
        "trainer.resume_mode=disable",
    ]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(args.nproc),
        "-m",
        "dagrl.main_dag",
        *overrides,
        *overrides_of(name, args),
        *extra,
    ]
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
    mean = lambda key: sum(row.get(key, 0.0) for row in steady) / len(steady)  # noqa: E731 - a short local helper
    # a scored batch: generation and the rule scorer. Runs before the rollout node waited for the slowest rank
    # (timing_s/gen_rank_spread) logged that wait as the scorer's (its all-reduce), each a mean over ranks
    produce = lambda row: row["timing_s/gen"] + row.get("timing_s/reward", 0.0)  # noqa: E731 - a short local helper
    train = lambda row: row["timing_s/step"] - row.get("timing_s/trainer_wait", produce(row))  # noqa: E731 - a short local helper
    seconds = sum(row["timing_s/step"] for row in steady)
    tokens = sum(row["response_length/mean"] * args.batch * args.n for row in steady)
    return {
        "step_s": mean("timing_s/step"),
        "gen_s": sum(map(produce, steady)) / len(steady),
        "tok_per_s": tokens / seconds,
        "gen_share": sum(map(produce, steady)) / seconds,
        "resp_mean": mean("response_length/mean"),
        "resp_max": mean("response_length/max"),
        "clip": mean("response_length/clip_ratio"),
        "stale": mean("async/staleness_mean"),
        "partial": mean("async/partial_fraction"),
        "prompt": mean("prompt_length/mean"),
        "roll_idle": sum(row.get("timing_s/rollout_pause", 0.0) for row in steady) / seconds,
        "train_idle": sum(row.get("timing_s/trainer_wait", 0.0) for row in steady) / seconds,
        "push_s": mean("timing_s/weight_push"),
        "push_gb": mean("async/push_gb"),
        "switch_s": mean("timing_s/rollout_switch"),
        "restarted": mean("async/restarted_groups"),
        # the training side's own seconds a step: colocated, what is not producing a batch; two pools, what is
        # not waiting for a batch (steps from 2: step 1 of two pools includes start-up work)
        "train_s": sum(map(train, rows[1:] or rows)) / len(rows[1:] or rows),
        # the same steps' trained (prompt + response) tokens a training second: the model' rate
        "train_tok_s": sum(
            (row.get("prompt_length/mean", 0.0) + row["response_length/mean"]) * args.batch * args.n
            for row in rows[1:] or rows
        )
        / max(sum(map(train, rows[1:] or rows)), 1e-9),
        "tok_per_gpu_s": tokens / seconds / args.nproc,
    }


def model_inputs(args: argparse.Namespace) -> tuple:
    """What the model takes from `plain` (every step): the fitted rates, the fit's details, the workload (with the
    run's own lengths replayed where they can be rebuilt: the data set's ROWS from --long-tail, else from plain.log;
    only if they give each plain step's measured longest response) and where its lengths come from."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import numpy as np
    from async_fit import fit_rates, replay
    from async_model import Workload, long_tail_lengths
    from dagrl.data.sampler import ORDERS

    rows = rows_of("plain", argparse.Namespace(**{**vars(args), "first_step": 1}))
    prompt = int(round(sum(r.get("prompt_length/mean", 0.0) for r in rows) / len(rows)))
    replayed, source = None, "drawn"
    if args.long_tail:
        mean, longest, *more = (float(v) for v in args.long_tail.split(","))

        def lengths(rng, count):
            return np.repeat(long_tail_lengths(rng, count // args.n, mean, int(longest)), args.n)

        log = Path(args.out) / "plain.log"
        found = re.search(r"data: (\d+) training prompts", log.read_text()) if log.exists() else None
        data_rows = int(more[0]) if more else int(found.group(1)) if found else 0
        if data_rows >= args.batch:
            draws = args.steps + math.ceil(args.oversample) + 1
            for order in ORDERS:  # a measured run drew the order of the dagrl that ran it
                candidate = replay(data_rows, mean, int(longest), args.batch, args.n, draws, order=order)
                tops = candidate[:: args.n][: len(rows) * args.batch].reshape(len(rows), -1).max(1)
                if all(top == row["response_length/max"] for top, row in zip(tops, rows)):
                    replayed = candidate
                    source = f"replayed ({data_rows} rows, {order} order, matching plain's longest each step)"
                    break
    else:
        mean_len = sum(r["response_length/mean"] for r in rows) / len(rows)
        lengths = lambda rng, count: np.full(count, mean_len)  # noqa: E731 - a short local helper
    work = Workload(batch=args.batch, n=args.n, prompt_len=prompt, lengths=lengths, replay=replayed)
    rates, fit = fit_rates(rows, args.nproc, args.batch, args.n, replayed, grouped=bool(args.long_tail))
    return rates, fit, work, source


def predicted_step(args: argparse.Namespace, name: str, inputs: tuple, own: dict | None = None) -> dict:
    """The model's run `name` from plain's rates (see the module docstring). With `own`, the run's own measured
    training rate (its summary's train_tok_s): training then runs at that pool's rate instead of plain's rate
    scaled by GPU count (a small model's training does not scale: fixed costs). Returns the model's mean step from
    step 2 on (its steady state: step 1 is start-up, counted or not), and over steps --first-step..--steps (those
    the measurement counts) its trained response tokens/s and step time over the model's plain run's and its mean
    trained response."""
    from async_model import colocated, two_pools

    base, _, work, _ = inputs
    partial = name.endswith("p") or name == "partial"
    rates = (
        base
        if own is None
        else dataclasses.replace(base, train_tok_s=own["train_tok_s"] / (args.nproc - args.rollout_procs))
    )

    def model(warm: int):
        if name == "partial":
            return colocated(
                work,
                rates,
                args.nproc,
                args.steps,
                partial=True,
                oversample=args.oversample,
                staleness=None if args.keep_stale else args.staleness,
                warm=warm,
            )
        return two_pools(
            work,
            rates,
            args.rollout_procs,
            args.nproc - args.rollout_procs,
            int(name[5:].rstrip("p")),
            args.steps,
            partial=partial,
            oversample=args.oversample,
            restarts=not args.keep_stale,
            warm=warm,
        )

    warm = args.first_step - 1
    plain, result = colocated(work, base, args.nproc, args.steps, warm=warm), model(warm)
    return {
        "step_s": model(max(1, warm)).step_s,
        "resp_mean": result.resp_mean,
        "ratio": (result.resp_mean / result.step_s) / (plain.resp_mean / plain.step_s),
        "step_ratio": plain.step_s / result.step_s,
    }


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
    parser.add_argument(
        "--long-tail", default="", help="MEAN,MAX[,ROWS] of the data's per-prompt limits (and its rows), for the model"
    )
    parser.add_argument(
        "--keep-stale",
        action="store_true",
        help="partial runs with async_training.restart_stale=false (and the model without restarts)",
    )
    parser.add_argument("--report", action="store_true", help="run nothing: the table of the runs in --out")
    parser.add_argument(
        "--first-step",
        type=int,
        default=1,
        help="count steps from this one (2: leave out step 1's one-time costs, e.g. the first wake-up)",
    )
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
    predicted, own, inputs = {}, {}, None
    if "plain" in results:
        inputs = model_inputs(args)
        rates, fit, _, source = inputs
    for name in names:
        if name != "plain" and inputs is not None:
            push = dataclasses.replace(rates, push_s=results.get(name, {}).get("push_s", 0.0))
            predicted[name] = predicted_step(args, name, (push, *inputs[1:]))
            if name.startswith("pools") and name in results:
                own[name] = predicted_step(args, name, (push, *inputs[1:]), own=results[name])
    columns = [
        "step_s",
        "gen_s",
        "train_s",
        "gen_share",
        "tok_per_s",
        "tok_per_gpu_s",
        "resp_mean",
        "resp_max",
        "clip",
        "stale",
        "partial",
        "restarted",
        "roll_idle",
        "train_idle",
        "push_s",
        "push_gb",
        "wall_s",
    ]
    print(
        f"steps {args.first_step}..{args.steps}, {args.batch} prompts x {args.n}, "
        f"response limit {args.response_length}, "
        f"{args.nproc} processes (pools: {args.rollout_procs} rollout + {args.nproc - args.rollout_procs} train); "
        f"partial: oversample {args.oversample}, colocated max_staleness {args.staleness}, "
        f"stale groups {'kept (restart_stale=false)' if args.keep_stale else 'restarted'}"
        + (
            f"; per-prompt limits long-tailed, mean {', max '.join(args.long_tail.split(',')[:2])}"
            if args.long_tail
            else ""
        )
    )
    if inputs is not None:
        print(
            f"model fitted to plain: decode iteration {1e3 * fit['a']:.3f} ms + "
            f"{1e3 * fit['c']:.4f} ms a sequence in "
            f"flight (a lone sequence {1 / (fit['a'] + fit['c']):.0f} tok/s), training {rates.train_tok_s:.0f} "
            f"tok/s/GPU, prefill {rates.prefill_tok_s:.0f} tok/s/GPU, switch {rates.switch_s:.2f} s a step; step 1 "
            f"extra: training {rates.first_train_s:.1f} s, first wake-up {rates.first_switch_s:.1f} s; lengths "
            f"{source}; decode s a plain step, model / measured: "
            + ", ".join(f"{m:.1f}/{d:.1f}" for m, d in zip(fit["model_decode_s"], fit["decode_s"]))
        )
    print(
        "model step_s: the model's mean step from step 2, from plain's rates, training scaled by GPU count; "
        "model' step_s: the same with the run's own measured training rate; the ratios below count the same steps "
        "as the measurement, each against the model's plain run"
    )
    print("| run | " + " | ".join(columns) + " | model step_s | model' step_s |")
    print("|---" * (len(columns) + 3) + "|")
    fmt = lambda table, name: f"{table[name]['step_s']:.3f}" if name in table else "-"  # noqa: E731 - a short local helper
    for name in names:
        cells = [f"{results[name][c]:.3f}" if name in results else "-" for c in columns]
        print(f"| {name} | " + " | ".join(cells) + f" | {fmt(predicted, name)} | {fmt(own, name)} |")
    within = []
    for name in results:
        if name != "plain" and "plain" in results:
            measured = results["plain"]["step_s"] / results[name]["step_s"]
            tokens = results[name]["tok_per_s"] / results["plain"]["tok_per_s"]
            model, model_own = predicted[name], own.get(name)
            within.append(abs((model_own or model)["ratio"] / tokens - 1) <= 0.2)
            print(
                f"{name} / plain: trained tokens/s {tokens:.3f}x (model {model['ratio']:.3f}x"
                + (f", model' {model_own['ratio']:.3f}x" if model_own else "")
                + f"), step time {measured:.3f}x "
                f"(model {model['step_ratio']:.3f}x); trained response mean {results[name]['resp_mean']:.0f} "
                f"(model {model['resp_mean']:.0f}, plain {results['plain']['resp_mean']:.0f})"
            )
    if within:
        print(
            f"model' (model where there is no model') within 20 % of the measured tokens/s ratio: "
            f"{sum(within)} of {len(within)}"
        )


if __name__ == "__main__":
    main()
