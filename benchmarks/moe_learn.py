"""The upcycled SmolLM2-MoE against the dense SmolLM2 it was made from: held-out accuracy per step, the
rollout/trainer log-prob gap and routing agreement, with routing replay (R3) off and on, one table.

usage: python3 benchmarks/moe_learn.py --out DIR [--arms dense,moe,moe_r3] [--seeds 0[,1]] [--steps 32]
           [--test-freq 4] [--experts 8] [--top-k 2] [--script examples/grpo_trainer/run_smollm2-135m-vllm.sh]
           [--report] [--extra "k=v ..."]

$MODEL_PATH is the dense model (SmolLM2-135M-Instruct); DIR/moe_model is made from it by scripts/upcycle_moe.py
(every expert a copy of the MLP, a small random router) unless it exists. Each arm runs the --script for --steps
steps with greedy held-out accuracy every --test-freq steps, in DIR/<arm>_seed<S>/:
  dense   the script as it is, on the dense model (the baseline)
  moe     the upcycled model, the rollout's routes recorded (the agreement logged), not replayed
  moe_r3  the upcycled model, the rollout's routes replayed in the trainer (router_replay.mode=R3)
Every arm samples the same prompts in the same order (data.seed) from a model whose step-0 outputs are the dense
model's. The table gives each arm's accuracy at every evaluated step (mean over seeds, min-max when several), its
seconds a step (median), and the mean over steps of the rollout/trainer log-prob gap
(training/rollout_log_probs_diff_mean) and of actor/routing_agreement where the run logs it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import GAP, ROOT, chosen_arms, learn_parser, values_of  # noqa: E402 - after the sys.path inserts above
from opd_learn import curve, run, spread  # noqa: E402 - the sibling's runner and curve reader

RECORD = ["actor_rollout_ref.rollout.enable_rollout_routing_replay=True"]  # routes recorded: the agreement is logged
R3 = [*RECORD, "actor_rollout_ref.actor.router_replay.mode=R3"]
ARMS = {"dense": (False, []), "moe": (True, RECORD), "moe_r3": (True, R3)}  # arm: (upcycled model, overrides)
AGREEMENT = "actor/routing_agreement"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = learn_parser(__doc__, "dense,moe,moe_r3", 32, 4, "examples/grpo_trainer/run_smollm2-135m-vllm.sh")
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    return parser.parse_args(argv)


def mean_of(directory: Path, key: str) -> float | None:
    """The mean over training steps of one metric of a run's metrics.jsonl; None when it never logged it."""
    values = values_of(directory, key)
    return statistics.fmean(values) if values else None


def report(args: argparse.Namespace) -> str:
    arms, seeds = args.arms.split(","), [int(s) for s in args.seeds.split(",")]
    runs = {arm: [args.out / f"{arm}_seed{s}" for s in seeds] for arm in arms}
    curves = {arm: [curve(d) for d in dirs] for arm, dirs in runs.items()}
    steps = sorted({step for arm_runs in curves.values() for accuracy, _ in arm_runs for step in accuracy})
    lines = [
        f"held-out greedy accuracy by step ({len(seeds)} seed(s): mean, min-max over seeds); "
        f"gap = mean |rollout - trainer| log-prob of sampled tokens; agreement = share of token x layer routes equal",
        "| arm | " + " | ".join(f"step {s}" for s in steps) + " | s/step (median) | gap | agreement |",
        "|---|" + "---|" * (len(steps) + 3),
    ]
    for arm, arm_runs in curves.items():
        cells = [
            spread([acc[s] for acc, _ in arm_runs if s in acc]) if any(s in acc for acc, _ in arm_runs) else "-"
            for s in steps
        ]
        seconds = [t for _, times in arm_runs for t in times]
        extra = []
        for key in (GAP, AGREEMENT):
            values = [v for v in (mean_of(d, key) for d in runs[arm]) if v is not None]
            extra.append(spread(values) if values else "-")
        lines.append(
            f"| {arm} | " + " | ".join(cells) + f" | {statistics.median(seconds) if seconds else 0:.2f} | "
            f"{extra[0]} | {extra[1]} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    arms = chosen_arms(args.arms, list(ARMS))
    dense = os.environ.get("MODEL_PATH", str(Path.home() / "models" / "SmolLM2-135M-Instruct"))
    moe = args.out / "moe_model"
    if not args.report:
        if any(ARMS[arm][0] for arm in arms) and not (moe / "config.json").is_file():
            command = [sys.executable, "scripts/upcycle_moe.py", dense, str(moe)]
            command += ["--experts", str(args.experts), "--top-k", str(args.top_k)]
            if subprocess.call(command, cwd=ROOT) != 0:
                sys.exit(f"upcycling {dense} failed")
        for seed in (int(s) for s in args.seeds.split(",")):
            for arm in arms:
                upcycled, overrides = ARMS[arm]
                run(f"{arm}_seed{seed}", overrides, seed, args, model=str(moe if upcycled else dense))
    table = report(args)
    (args.out / "report.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
