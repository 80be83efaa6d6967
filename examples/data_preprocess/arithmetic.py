"""The synthetic addition task: "What is a + b?" with a, b in 0..max_operand; the reward is exact-match of the
last number in the answer (dagrl.reward.scorers.arithmetic). Small instruct models learn it visibly within
minutes on CPU: with plain GRPO on 2 cores, SmolLM2-135M-Instruct's held-out greedy accuracy on sums of 0..19 rose
from 0.21 to 0.70 in about 9 minutes of training.

    python3 examples/data_preprocess/arithmetic.py --local_dir ~/data/arithmetic
The test problems are disjoint from the train problems.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np

from common import convert_and_write, schema_row, fail, setup_logging

DATA_SOURCE = "dagrl/arithmetic"
SYSTEM_PROMPT = "Answer with only the final number."

logger = logging.getLogger(__name__)


def make_row(problem: tuple[int, int], split: str, index: int) -> dict:
    a, b = problem
    question = f"What is {a} + {b}?"
    answer = str(a + b)
    prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
    return schema_row(DATA_SOURCE, prompt, "arithmetic", answer, split, index, answer, question)


def split_problems(
    max_operand: int, train_size: int | None, test_size: int, seed: int
) -> dict[str, list[tuple[int, int]]]:
    """Every (a, b) pair once, shuffled; the first `test_size` are test, train draws from the rest (cycling
    through them again if more train rows than train problems are asked for)."""
    problems = [(a, b) for a in range(max_operand + 1) for b in range(max_operand + 1)]
    if not 0 < test_size < len(problems):
        fail(
            f"--test_size {test_size} must be between 1 and {len(problems) - 1}: --max_operand {max_operand} "
            f"gives {len(problems)} distinct problems"
        )
    order = np.random.default_rng(seed).permutation(len(problems))
    test = [problems[i] for i in order[:test_size]]
    pool = [problems[i] for i in order[test_size:]]
    train_size = len(pool) if train_size is None else train_size
    if train_size <= 0:
        fail(f"--train_size must be positive, got {train_size}")
    if train_size > len(pool):
        logger.info("--train_size %d > %d distinct train problems: problems repeat", train_size, len(pool))
    train = [pool[i % len(pool)] for i in range(train_size)]
    return {"train": train, "test": test}


def main(row_maker=make_row, default_dir: str = "~/data/arithmetic", description: str = __doc__) -> None:
    """The command line of the sums tasks (this one and addition_retry.py): rows by `row_maker`."""
    parser = argparse.ArgumentParser(description=description.splitlines()[0])
    parser.add_argument("--local_dir", default=default_dir, help="output directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_operand", type=int, default=19, help="operands are drawn from 0..max_operand")
    parser.add_argument(
        "--train_size", type=int, default=None, help="train rows (default: every problem not in test, once)"
    )
    parser.add_argument("--test_size", type=int, default=256, help="test rows, disjoint from train")
    args = parser.parse_args()
    setup_logging()
    if args.max_operand < 1:
        fail(f"--max_operand must be at least 1, got {args.max_operand}")
    splits = split_problems(args.max_operand, args.train_size, args.test_size, args.seed)
    convert_and_write(splits, row_maker, args.local_dir)


if __name__ == "__main__":
    main()
