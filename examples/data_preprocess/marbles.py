"""The harder calculator task: "A box holds 347 marbles. How many marbles are in 812 boxes and 129 more boxes?"
(a * (b + c), 3-digit numbers). The model has to write the expression itself, parentheses included, before the
calculator (examples/agentic/tool_config.yaml) can help; the answers (5-7 digits) are out of reach without it. Same
prompt as products.py: its system message and two worked examples of the tool-call format as earlier turns of the
chat, here on 2- and 4-digit numbers. SmolLM2-135M-Instruct calls the tool at step 0 but, greedy, answers only
0.38-0.47 of the questions right (docs/agentic.md), so held-out greedy accuracy has room to grow. The
reward is exact match of the last number in the answer, thousands separators allowed
(dagrl.reward.scorers.last_number).

    python3 examples/data_preprocess/marbles.py --local_dir ~/data/marbles
The test problems are disjoint from the train problems, counting (a, b, c) and (a, c, b) as one problem.
"""

from __future__ import annotations

import numpy as np

from common import convert_and_write, fail, setup_logging
from products import tool_row, tool_task_parser

DATA_SOURCE = "dagrl/marbles"
QUESTION = "A box holds {a} marbles. How many marbles are in {b} boxes and {c} more boxes?"


def question(a: int, b: int, c: int) -> str:
    return QUESTION.format(a=a, b=b, c=c)


def expression(a: int, b: int, c: int) -> str:
    return f"{a} * ({b} + {c})"


# Worked examples (question, calculator expression, result), on numbers of 2 and 4 digits: never asked.
EXAMPLES = tuple(
    (question(*abc), expression(*abc), str(abc[0] * (abc[1] + abc[2]))) for abc in ((12, 34, 5), (1234, 56, 7))
)


def make_row(problem: tuple[int, int, int], split: str, index: int, examples_in: str = "turns") -> dict:
    a, b, c = problem
    return tool_row(DATA_SOURCE, question(a, b, c), str(a * (b + c)), split, index, examples_in, EXAMPLES)


def split_problems(train_size: int, test_size: int, seed: int) -> dict[str, list[tuple[int, int, int]]]:
    """Distinct problems of three 3-digit numbers, seeded; the first `test_size` are test, the next `train_size`
    train. (a, b, c) and (a, c, b) have one answer and count as one problem."""
    if train_size <= 0 or test_size <= 0:
        fail(f"--train_size and --test_size must be positive, got {train_size} and {test_size}")
    rng = np.random.default_rng(seed)
    problems, seen = [], set()
    while len(problems) < train_size + test_size:
        for a, b, c in rng.integers(100, 1000, size=(train_size + test_size, 3)).tolist():
            key = (a, min(b, c), max(b, c))
            if key not in seen and len(problems) < train_size + test_size:
                seen.add(key)
                problems.append((a, b, c))
    return {"test": problems[:test_size], "train": problems[test_size:]}


def main() -> None:
    args = tool_task_parser("marbles", __doc__.splitlines()[0]).parse_args()
    setup_logging()
    if args.train_size + args.test_size > 10_000_000:  # 900 * 900 * 901 / 2 distinct problems; keep it sane
        fail(f"--train_size + --test_size must be at most 10000000, got {args.train_size + args.test_size}")
    splits = split_problems(args.train_size, args.test_size, args.seed)
    convert_and_write(splits, lambda *row: make_row(*row, examples_in=args.examples_in), args.local_dir)


if __name__ == "__main__":
    main()
