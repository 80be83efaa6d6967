"""FP8 rollout beside bf16 on the quickstart's task: SmolLM2-135M-Instruct GRPO on arithmetic, held-out accuracy per
evaluated step, seconds a step, the weight sync and the rollout/trainer log-prob gap, one table.

usage: python3 benchmarks/fp8_learn.py --out DIR [--arms bf16,fp8_tis,fp8_mis] [--seeds 0] [--steps 16]
           [--test-freq 4] [--tis-cap 2] [--mis-low 0.5] [--mis-high 2]
           [--script examples/grpo_trainer/run_smollm2-135m-vllm.sh] [--report] [--extra "k=v ..."]

Each arm runs the --script (vLLM rollout, which keeps the rollout's log-probs) for --steps steps, in
DIR/<arm>_seed<S>/:
  bf16     the script as it is
  fp8_tis  FP8 rollout weights (actor_rollout_ref.rollout.quantization=fp8; per-tensor scales on SmolLM2's widths)
           with token-level truncated importance sampling at --tis-cap (verl's FP8 recipe)
  fp8_mis  FP8 rollout without TIS: sequences whose rollout/trainer ratio leaves [--mis-low, --mis-high] are masked
           instead (an FP8 rollout with no correction at all is refused by pre-flight, so this is the arm without TIS)
The gap column (mean |rollout - trainer| log-prob of the sampled tokens) shows what FP8 adds to the mismatch; the
sync columns what sending FP8 weights with their scales costs. Every arm samples the same prompts in the same
order (data.seed) from the same model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.common import learn_parser, run_arms  # noqa: E402 - after the sys.path inserts above
from lora_learn import report  # noqa: E402 - the sibling's table: accuracy, s/step, sync, gap
from opd_learn import run  # noqa: E402 - the sibling's runner

FP8 = "actor_rollout_ref.rollout.quantization=fp8"


def arms(args: argparse.Namespace) -> dict[str, list[str]]:
    return {
        "bf16": [],
        "fp8_tis": [FP8, f"actor_rollout_ref.actor.tis_imp_ratio_cap={args.tis_cap}"],
        "fp8_mis": [
            FP8,
            f"actor_rollout_ref.actor.mis_ratio_low={args.mis_low}",
            f"actor_rollout_ref.actor.mis_ratio_high={args.mis_high}",
        ],
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = learn_parser(__doc__, "bf16,fp8_tis,fp8_mis", 16, 4, "examples/grpo_trainer/run_smollm2-135m-vllm.sh")
    parser.add_argument("--tis-cap", type=float, default=2.0)
    parser.add_argument("--mis-low", type=float, default=0.5)
    parser.add_argument("--mis-high", type=float, default=2.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    run_arms(args, arms(args), run)
    table = report(args)
    (args.out / "report.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
