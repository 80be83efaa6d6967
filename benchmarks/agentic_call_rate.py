"""Step-0 tool-call rate and accuracy of a model on a calculator task (products.py, 3-digit x 3-digit, by default;
--task marbles for the harder a * (b + c) word problem), before any training: the two worked examples as earlier
turns of the chat (the task's default) against the same examples written in the system message.

usage: python3 benchmarks/agentic_call_rate.py --model DIR [--task products|marbles] [--prompts 128] [--n 8]
           [--temperature 1.0 | --greedy] [--variants turns,system] [--task_args ARGS] [--rollout vllm|hf] [--out DIR]
           [-- extra dotted overrides for every run]

Writes each variant of the test set with examples/data_preprocess/<task>.py, runs `dagrl.main_dag` once per variant
with trainer.val_only (a validation of the untrained model, no training step: `--n` samples per prompt at
`--temperature`, or one greedy answer with --greedy, the multi-turn loop of
examples/agentic/run_smollm2-135m-products-vllm.sh), and prints one table from that validation: the share of
trajectories with at least one valid call (parsed, a known tool, answered), calls and turns per trajectory, the final
answer's accuracy and the share cut by the response limit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"turns": "examples as turns", "system": "examples in system"}


def overrides(args: argparse.Namespace, data: Path, out: Path) -> list[str]:
    """The dotted overrides of one validation-only run (the multi-turn loop of the products GPU script)."""
    sampling = (
        ["actor_rollout_ref.rollout.val_kwargs.n=1", "actor_rollout_ref.rollout.val_kwargs.do_sample=false"]
        if args.greedy
        else [
            f"actor_rollout_ref.rollout.val_kwargs.n={args.n}",
            "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
            f"actor_rollout_ref.rollout.val_kwargs.temperature={args.temperature}",
        ]
    )
    return [
        f"actor_rollout_ref.model.path={args.model}",
        f"data.train_files={data}/train.parquet",
        f"data.val_files={data}/test.parquet",
        "data.train_batch_size=32",
        "data.max_prompt_length=640",
        "data.max_response_length=128",
        f"actor_rollout_ref.rollout.name={args.rollout}",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=32",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        *sampling,
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={ROOT}/examples/agentic/tool_config.yaml",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        "trainer.total_training_steps=1",
        "trainer.val_only=true",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        "trainer.logger=[console,jsonl]",
        f"trainer.default_local_dir={out}",
    ]


def step0(args: argparse.Namespace, examples_in: str, extra: list[str]) -> dict:
    data, out = Path(args.out) / f"data_{examples_in}", Path(args.out) / f"run_{examples_in}"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / f"examples/data_preprocess/{args.task}.py"),
            "--local_dir",
            str(data),
            "--train_size",
            "256",
            "--test_size",
            str(args.prompts),
            "--examples_in",
            examples_in,
            *args.task_args.split(),
        ],
        check=True,
        capture_output=True,
    )
    done = subprocess.run(
        [sys.executable, "-m", "dagrl.main_dag", *overrides(args, data, out), *extra], capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"{examples_in} run failed ({done.returncode}):\n{done.stderr[-4000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return next(row for row in rows if row.get("step") == 0)


def table_line(examples_in: str, row: dict, task: str) -> str:
    """One line of the table from the step-0 metrics row: valid call, calls, turns, accuracy, truncated."""
    get = lambda key: row.get(f"val-aux/multi_turn/{key}", float("nan"))  # noqa: E731 - a short local helper
    acc = next(v for k, v in row.items() if k.startswith(f"val-core/dagrl/{task}/acc/mean@"))
    return (
        f"{VARIANTS[examples_in]:<22}{get('valid_call_ratio'):>11.3f}{get('tool_calls/mean'):>7.2f}"
        f"{get('num_turns/mean'):>7.2f}{acc:>7.3f}{get('truncated_ratio'):>10.3f}"
    )


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument(
        "--task", default="products", help="the data script examples/data_preprocess/<task>.py (products, marbles)"
    )
    parser.add_argument("--task_args", default="", help='more arguments for the data script, e.g. "--seed 1"')
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--greedy", action="store_true", help="one greedy answer per prompt instead of --n samples")
    parser.add_argument(
        "--variants",
        default="turns,system",
        help="where the worked examples go, comma-separated: turns (earlier chat turns), system",
    )
    parser.add_argument("--rollout", default="vllm")
    parser.add_argument("--out", default="/tmp/agentic_call_rate")
    args, extra = parser.parse_known_args(argv)
    args.variants = args.variants.split(",")
    if not (ROOT / f"examples/data_preprocess/{args.task}.py").is_file():
        parser.error(f"--task {args.task}: no examples/data_preprocess/{args.task}.py")
    if unknown := sorted(set(args.variants) - set(VARIANTS)):
        parser.error(f"--variants: unknown {unknown}, choose from {sorted(VARIANTS)}")
    return args, [x for x in extra if x != "--"]


def main() -> None:
    args, extra = parse_args()
    sampling = "greedy" if args.greedy else f"x {args.n}, T={args.temperature}"
    print(f"{args.task} task, step 0: {args.prompts} test prompts {sampling}, {args.rollout}, {Path(args.model).name}")
    print(f"{'variant':<22}{'valid call':>11}{'calls':>7}{'turns':>7}{'acc':>7}{'truncated':>10}")
    for examples_in in args.variants:
        print(table_line(examples_in, step0(args, examples_in, extra), args.task), flush=True)


if __name__ == "__main__":
    main()
