"""The synthetic tool task: "What is 347 * 812?" (3-digit x 3-digit products), which a small model cannot compute
but can answer by calling the calculator tool (examples/agentic/tool_config.yaml). The reward is exact match of the
last number in the answer, thousands separators allowed (dagrl.reward.scorers.last_number).

    python3 examples/data_preprocess/products.py --local_dir ~/data/products
The test problems are disjoint from the train problems, counting a * b and b * a as one problem.
"""

from __future__ import annotations

import argparse
import re

import numpy as np

from common import convert_and_write, schema_row, fail, setup_logging

DATA_SOURCE = "dagrl/products"
TOOL_NAME = "calculator"

# How to call the tool, for a model that has never seen one (SmolLM2-135M-Instruct): the exact text to write. The
# chat template or the turn loop appends the tools' schemas after it.
CALCULATOR_HOWTO = (
    'To use the calculator, write exactly: <tool_call>{"name": "calculator", "arguments": {"expression": '
    '"12 * 34"}}</tool_call> and stop. The result comes back in the next message.'
)
SYSTEM_PROMPT = f"You can use a calculator tool. {CALCULATOR_HOWTO} Then answer with only the final number."
# Two worked examples, given as earlier turns of the conversation: SmolLM2-135M-Instruct imitates turns it has seen
# (18 of 32 first turns call the tool at T=1) but not examples described in the system message (0 of 32;
# benchmarks/agentic_call_rate.py).
EXAMPLES = (("What is 12 * 34?", "12 * 34", "408"), ("What is 1234 * 56?", "1234 * 56", "69104"))


def example_turns(examples: tuple[tuple[str, str, str], ...] = EXAMPLES) -> list[dict]:
    """Each worked example (question, expression, result) as four turns: the question, the call, the tool's result
    and the result as the answer."""
    turns = []
    for question, expression, result in examples:
        call = f'<tool_call>{{"name": "{TOOL_NAME}", "arguments": {{"expression": "{expression}"}}}}</tool_call>'
        turns += [
            {"role": "user", "content": question},
            {"role": "assistant", "content": call},
            {"role": "tool", "content": result},
            {"role": "assistant", "content": result},
        ]
    return turns


def tools_kwargs(ground_truth: str) -> dict:
    """verl's shape: tool name -> {"create_kwargs": ...}. Parquet cannot store an empty struct, so create_kwargs
    carries the ground truth (as verl's gsm8k tool rows do); the calculator ignores it."""
    return {TOOL_NAME: {"create_kwargs": {"ground_truth": ground_truth}}}


def examples_in_system(examples: tuple[tuple[str, str, str], ...] = EXAMPLES) -> str:
    """The worked examples written out in the system message instead (--examples_in system)."""
    turns = example_turns(examples)
    shown = "\n\n".join(
        f"Example {i}:\nUser: {m[0]['content']}\nAssistant: {m[1]['content']}\n"
        f"Tool: {m[2]['content']}\nAssistant: {m[3]['content']}"
        for i, m in enumerate((turns[4 * k : 4 * k + 4] for k in range(len(examples))), start=1)
    )
    return f"{SYSTEM_PROMPT}\n\n{shown}"


def tool_row(
    data_source: str,
    question: str,
    answer: str,
    split: str,
    index: int,
    examples_in: str = "turns",
    examples: tuple[tuple[str, str, str], ...] = EXAMPLES,
) -> dict:
    """A row that offers the calculator: SYSTEM_PROMPT, the worked examples (as earlier turns of the chat, or
    written in the system message) and the question; the answer is the ground truth."""
    if examples_in == "turns":
        prompt = [
            {"role": "system", "content": SYSTEM_PROMPT},
            *example_turns(examples),
            {"role": "user", "content": question},
        ]
    else:
        prompt = [{"role": "system", "content": examples_in_system(examples)}, {"role": "user", "content": question}]
    row = schema_row(data_source, prompt, "arithmetic", answer, split, index, answer, question)
    row["extra_info"].update(need_tools_kwargs=True, tools_kwargs=tools_kwargs(answer))
    return row


def make_row(problem: tuple[int, int], split: str, index: int, examples_in: str = "turns") -> dict:
    a, b = problem
    return tool_row(DATA_SOURCE, f"What is {a} * {b}?", str(a * b), split, index, examples_in)


def split_problems(digits: int, train_size: int, test_size: int, seed: int) -> dict[str, list[tuple[int, int]]]:
    """Distinct unordered pairs of `digits`-digit operands, seeded; the first `test_size` are test, the next
    `train_size` train. Operands are put in random order, and the examples of SYSTEM_PROMPT are never asked."""
    low, high = 10 ** (digits - 1), 10**digits - 1
    first, second = np.triu_indices(high - low + 1)  # every a <= b once
    first, second = first + low, second + low
    shown = {tuple(sorted(map(int, re.findall(r"\d+", question)))) for question, _, _ in EXAMPLES}
    keep = np.ones(len(first), dtype=bool)
    for a, b in shown:
        keep &= (first != a) | (second != b)
    first, second = first[keep], second[keep]
    if train_size <= 0 or test_size <= 0:
        fail(f"--train_size and --test_size must be positive, got {train_size} and {test_size}")
    if train_size + test_size > len(first):
        fail(
            f"--train_size {train_size} + --test_size {test_size} exceeds the {len(first)} distinct problems "
            f"of --digits {digits}"
        )
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(first), size=train_size + test_size, replace=False)
    swap = rng.random(len(chosen)) < 0.5
    problems = [(int(second[i]), int(first[i])) if s else (int(first[i]), int(second[i])) for i, s in zip(chosen, swap)]
    return {"test": problems[:test_size], "train": problems[test_size:]}


def tool_task_parser(name: str, description: str) -> argparse.ArgumentParser:
    """The arguments of a calculator task script (this one, marbles.py): output, seed, split sizes and where the
    worked examples go."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--local_dir", default=f"~/data/{name}", help="output directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train_size", type=int, default=8192, help="train rows")
    parser.add_argument("--test_size", type=int, default=256, help="test rows, disjoint from train")
    parser.add_argument(
        "--examples_in",
        choices=("turns", "system"),
        default="turns",
        help="the two worked examples as earlier turns of the chat, or written in the system message",
    )
    return parser


def main() -> None:
    parser = tool_task_parser("products", __doc__.splitlines()[0])
    parser.add_argument("--digits", type=int, default=3, help="digits of each operand")
    args = parser.parse_args()
    setup_logging()
    if not 1 <= args.digits <= 3:  # every pair is enumerated: 4 digits would be 40M of them
        fail(f"--digits must be between 1 and 3, got {args.digits}")
    splits = split_problems(args.digits, args.train_size, args.test_size, args.seed)
    convert_and_write(splits, lambda *row: make_row(*row, examples_in=args.examples_in), args.local_dir)


if __name__ == "__main__":
    main()
