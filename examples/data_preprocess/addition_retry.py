"""The tool-free multi-turn control: arithmetic.py's addition problems, answered in turns with feedback. The
try_again interaction (examples/agentic/interaction_config.yaml, dagrl.agent.interaction.TryAgainInteraction)
replies "Wrong, try again." until the last number of the answer is the sum; the reward is the last number of the
whole response (dagrl.reward.scorers.arithmetic).

    python3 examples/data_preprocess/addition_retry.py --local_dir ~/data/addition_retry
The test problems are disjoint from the train problems.
"""
from __future__ import annotations

import argparse

from arithmetic import split_problems
from common import convert_and_write, schema_row, fail, setup_logging

DATA_SOURCE = "dagrl/addition_retry"
INTERACTION_NAME = "try_again"
SYSTEM_PROMPT = "Answer with only the final number. If you are told the answer is wrong, answer again."


def make_row(problem: tuple[int, int], split: str, index: int) -> dict:
    a, b = problem
    question = f"What is {a} + {b}?"
    answer = str(a + b)
    prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
    row = schema_row(DATA_SOURCE, prompt, "arithmetic", answer, split, index, answer, question)
    # verl's shape: `name` picks the interaction, the rest go to its start_interaction
    row["extra_info"]["interaction_kwargs"] = {"name": INTERACTION_NAME, "query": question, "ground_truth": answer}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_dir", default="~/data/addition_retry", help="output directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_operand", type=int, default=19, help="operands are drawn from 0..max_operand")
    parser.add_argument("--train_size", type=int, default=None,
                        help="train rows (default: every problem not in test, once)")
    parser.add_argument("--test_size", type=int, default=256, help="test rows, disjoint from train")
    args = parser.parse_args()
    setup_logging()
    if args.max_operand < 1:
        fail(f"--max_operand must be at least 1, got {args.max_operand}")
    splits = split_problems(args.max_operand, args.train_size, args.test_size, args.seed)
    convert_and_write(splits, make_row, args.local_dir)


if __name__ == "__main__":
    main()
