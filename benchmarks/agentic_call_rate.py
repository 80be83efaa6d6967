"""Step-0 tool-call rate of a model on the products task (3-digit x 3-digit, the calculator offered), before any
training: the two worked examples as earlier turns of the chat (the task's default) against the same examples
written in the system message.

usage: python3 benchmarks/agentic_call_rate.py --model DIR [--prompts 128] [--n 8] [--temperature 1.0]
           [--rollout vllm|hf] [--out DIR] [-- extra dotted overrides for both runs]

Writes both variants of the test set with examples/data_preprocess/products.py, runs `dagrl.main_dag` once per
variant with a sampled validation before training (`--n` samples per prompt at `--temperature`, the multi-turn loop
of examples/agentic/run_smollm2-135m-products-vllm.sh) and one training step, and prints one table from the step-0
validation: the share of trajectories with at least one valid call (parsed, a known tool, answered), calls and
turns per trajectory, the final answer's accuracy and the share cut by the response limit.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {"examples as turns": "turns", "examples in system": "system"}


def step0(args: argparse.Namespace, examples_in: str, extra: list[str]) -> dict:
    data, out = Path(args.out) / f"data_{examples_in}", Path(args.out) / f"run_{examples_in}"
    subprocess.run([sys.executable, str(ROOT / "examples/data_preprocess/products.py"), "--local_dir", str(data),
                    "--train_size", "256", "--test_size", str(args.prompts), "--examples_in", examples_in],
                   check=True, capture_output=True)
    overrides = [
        f"actor_rollout_ref.model.path={args.model}", f"data.train_files={data}/train.parquet",
        f"data.val_files={data}/test.parquet", "data.train_batch_size=32", "data.max_prompt_length=640",
        "data.max_response_length=128", f"actor_rollout_ref.rollout.name={args.rollout}",
        "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.actor.ppo_mini_batch_size=32",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        f"actor_rollout_ref.rollout.val_kwargs.n={args.n}", "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        f"actor_rollout_ref.rollout.val_kwargs.temperature={args.temperature}",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={ROOT}/examples/agentic/tool_config.yaml",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        "trainer.total_training_steps=1", "trainer.val_before_train=true", "trainer.test_freq=-1",
        "trainer.save_freq=-1", "trainer.resume_mode=disable", "trainer.logger=[console,jsonl]",
        f"trainer.default_local_dir={out}"]
    done = subprocess.run([sys.executable, "-m", "dagrl.main_dag", *overrides, *extra], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{examples_in} run failed ({done.returncode}):\n{done.stderr[-4000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return next(row for row in rows if row.get("step") == 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--rollout", default="vllm")
    parser.add_argument("--out", default="/tmp/agentic_call_rate")
    args, extra = parser.parse_known_args()
    extra = [x for x in extra if x != "--"]
    print(f"products task, step 0: {args.prompts} test prompts x {args.n}, T={args.temperature}, {args.rollout}, "
          f"{Path(args.model).name}")
    print(f"{'variant':<22}{'valid call':>11}{'calls':>7}{'turns':>7}{'acc':>7}{'truncated':>10}")
    for name, examples_in in VARIANTS.items():
        row = step0(args, examples_in, extra)
        get = lambda key: row.get(f"val-aux/multi_turn/{key}", float("nan"))  # noqa: E731
        acc = next(v for k, v in row.items() if k.startswith("val-core/dagrl/products/acc/mean@"))
        print(f"{name:<22}{get('valid_call_ratio'):>11.3f}{get('tool_calls/mean'):>7.2f}"
              f"{get('num_turns/mean'):>7.2f}{acc:>7.3f}{get('truncated_ratio'):>10.3f}", flush=True)


if __name__ == "__main__":
    main()
