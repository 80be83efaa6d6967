"""GSM8K -> train/test parquet for dagrl (verl/siiRL schema).

    python3 examples/data_preprocess/gsm8k.py --local_dir ~/data/gsm8k
    python3 examples/data_preprocess/gsm8k.py --source_dir gsm8k_dir/   # offline: train.jsonl + test.jsonl
Rows need `question` and `answer` (the reference solution ending in "#### <number>").
"""

from __future__ import annotations

import re

from common import (
    schema_row,
    base_parser,
    convert_and_write,
    fail,
    hold_out_test,
    read_hub_source,
    read_local_source,
    require_fields,
    setup_logging,
)

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
_FINAL_ANSWER = re.compile(r"####\s*(-?[0-9.,]+)")


def final_answer(solution: str, where: str) -> str:
    match = _FINAL_ANSWER.search(solution)
    if match is None:
        fail(f"{where}: the answer has no '#### <number>' final answer: {solution[-80:]!r}")
    return match.group(1).replace(",", "").rstrip(".")


def make_row(raw: dict, split: str, index: int) -> dict:
    question, answer = raw["question"], raw["answer"]
    ground_truth = final_answer(answer, f"{split} row {index} ({question[:60]!r})")
    return schema_row(
        DATA_SOURCE,
        [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
        "math",
        ground_truth,
        split,
        index,
        answer,
        question,
    )


def main() -> None:
    args = base_parser("gsm8k", __doc__.splitlines()[0]).parse_args()
    setup_logging()
    splits = read_local_source(args.source_dir) if args.source_dir else read_hub_source(DATA_SOURCE, "main")
    for split, rows in splits.items():
        require_fields(rows, ("question", "answer"), f"{args.source_dir or DATA_SOURCE} {split}")
    splits = hold_out_test(splits, args.test_size, args.seed)
    convert_and_write(splits, make_row, args.local_dir)


if __name__ == "__main__":
    main()
