"""LoRA beside the quickstart's fine-tuning: SmolLM2-135M-Instruct on the arithmetic task, held-out accuracy per
evaluated step and seconds a step, one table.

usage: python3 benchmarks/lora_learn.py --out DIR [--arms lora,top4,full,lora_adapter] [--seeds 0] [--steps 10]
           [--test-freq 5] [--rank 16] [--alpha 32] [--lora-lr 3e-4]
           [--script examples/grpo_trainer/run_smollm2-135m-cpu.sh] [--report] [--extra "k=v ..."]

Each arm runs the --script (the quickstart's, CPU and hf rollout by default) for --steps steps with held-out accuracy
every --test-freq steps, in DIR/<arm>_seed<S>/:
  top4  the script as it is: the top 4 decoder layers train
  full  every parameter trains (trainable_top_layers=null)
  lora  adapters of --rank on every linear of a frozen base, merged into the rollout's weights each step, at
        --lora-lr (adapters want a higher learning rate than the base, as verl's LoRA examples use)
  lora_adapter  the same adapters sent alone each step (adapter-only sync: lora.merge=false)
The table adds each arm's weight sync (median seconds and MB a step) and its rollout/trainer log-prob gap (mean over
steps of training/rollout_log_probs_diff_mean, logged where the rollout returns log-probs).
Every arm samples the same prompts in the same order (data.seed) and starts from the same model (LoRA's B is zero).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import GAP, learn_parser, run_arms, values_of  # noqa: E402 - after the sys.path inserts above
from opd_learn import curve, run, spread  # noqa: E402 - the sibling's runner and curve reader

SYNC_S, SYNC_GB = "timing_s/weight_sync", "perf/weight_sync_gb"


def arms(args: argparse.Namespace) -> dict[str, list[str]]:
    lora = [
        "actor_rollout_ref.model.trainable_top_layers=null",
        f"actor_rollout_ref.model.lora.rank={args.rank}",
        f"actor_rollout_ref.model.lora.alpha={args.alpha}",
        f"actor_rollout_ref.actor.optim.lr={args.lora_lr}",
    ]
    return {
        "top4": [],
        "full": ["actor_rollout_ref.model.trainable_top_layers=null"],
        "lora": [*lora, "actor_rollout_ref.model.lora.merge=true"],
        "lora_adapter": [*lora, "actor_rollout_ref.model.lora.merge=false"],
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = learn_parser(__doc__, "lora,top4,full", 10, 5, "examples/grpo_trainer/run_smollm2-135m-cpu.sh")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--alpha", type=float, default=32)
    parser.add_argument("--lora-lr", type=float, default=3e-4)
    return parser.parse_args(argv)


def report(args: argparse.Namespace) -> str:
    names, seeds = args.arms.split(","), [int(s) for s in args.seeds.split(",")]
    curves = {name: [curve(args.out / f"{name}_seed{s}") for s in seeds] for name in names}
    steps = sorted({step for runs in curves.values() for accuracy, _ in runs for step in accuracy})
    lines = ["| arm | " + " | ".join(f"acc @{s}" for s in steps) + " | s/step (median) | sync s | sync MB | gap |"]
    lines.append("|---" * (len(steps) + 5) + "|")
    for name, runs in curves.items():
        cells = []
        for step in steps:
            values = [accuracy[step] for accuracy, _ in runs if step in accuracy]
            cells.append(spread(values) if values else "-")
        seconds = [s for _, times in runs for s in times]
        cells.append(f"{statistics.median(seconds):.1f}" if seconds else "-")
        dirs = [args.out / f"{name}_seed{s}" for s in seeds]
        for key, scale, form in ((SYNC_S, 1, ".3f"), (SYNC_GB, 1e3, ".1f"), (GAP, 1, ".3f")):
            values = [v for d in dirs for v in values_of(d, key)]
            average = statistics.median if key != GAP else statistics.fmean
            cells.append(format(average(values) * scale, form) if values else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    run_arms(args, arms(args), run)
    print(report(args))


if __name__ == "__main__":
    main()
