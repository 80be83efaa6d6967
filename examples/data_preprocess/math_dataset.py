"""MATH (competition mathematics) -> train/test parquet for dagrl (verl/siiRL schema).

    python3 examples/data_preprocess/math_dataset.py --local_dir ~/data/math
    python3 examples/data_preprocess/math_dataset.py --source_dir math_dir/   # offline: train.* + test.*
Rows need `problem` and either `answer` or a `solution` with a \\boxed{} final answer.
"""

from __future__ import annotations

from common import (
    schema_row,
    base_parser,
    convert_and_write,
    extract_last_boxed,
    fail,
    hold_out_test,
    read_hub_source,
    read_local_source,
    require_fields,
    setup_logging,
)

DATA_SOURCE = "DigitalLearningGmbH/MATH-lighteval"
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def ground_truth(raw: dict, where: str) -> str:
    if raw.get("answer") is not None:
        return str(raw["answer"])
    if raw.get("solution") is None:
        fail(f"{where} lacks both 'answer' and 'solution' (each row needs problem and one of them)")
    boxed = extract_last_boxed(raw["solution"])
    if boxed is None:
        fail(f"{where}: the solution has no \\boxed{{}} final answer: {raw['solution'][-80:]!r}")
    return boxed


def make_row(raw: dict, split: str, index: int) -> dict:
    problem = raw["problem"]
    answer = ground_truth(raw, f"{split} row {index} ({problem[:60]!r})")
    return schema_row(
        DATA_SOURCE,
        [{"role": "user", "content": f"{problem} {INSTRUCTION}"}],
        "math",
        answer,
        split,
        index,
        raw.get("solution") or answer,
        problem,
    )


def main() -> None:
    args = base_parser("math", __doc__.splitlines()[0]).parse_args()
    setup_logging()
    splits = read_local_source(args.source_dir) if args.source_dir else read_hub_source(DATA_SOURCE)
    for split, rows in splits.items():
        require_fields(rows, ("problem",), f"{args.source_dir or DATA_SOURCE} {split}")
    splits = hold_out_test(splits, args.test_size, args.seed)
    convert_and_write(splits, make_row, args.local_dir)


if __name__ == "__main__":
    main()
