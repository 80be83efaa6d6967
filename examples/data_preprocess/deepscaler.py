"""DeepScaleR-Preview (40k competition math problems) -> train/test parquet for dagrl (verl/siiRL schema).

    python3 examples/data_preprocess/deepscaler.py --local_dir ~/data/deepscaler
    python3 examples/data_preprocess/deepscaler.py --source_dir deepscaler.json   # offline
Rows need `problem` and `answer`. The dataset has only a train split: a seeded test split is held out of it
(--test_size rows, default 500).
"""

from __future__ import annotations

from common import (
    schema_row,
    base_parser,
    convert_and_write,
    hold_out_test,
    read_hub_source,
    read_local_source,
    require_fields,
    setup_logging,
)

DATA_SOURCE = "agentica-org/DeepScaleR-Preview-Dataset"
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def make_row(raw: dict, split: str, index: int) -> dict:
    problem, answer = raw["problem"], str(raw["answer"])
    return schema_row(
        DATA_SOURCE,
        [{"role": "user", "content": f"{problem} {INSTRUCTION}"}],
        "math",
        answer,
        split,
        index,
        answer,
        problem,
    )


def main() -> None:
    args = base_parser("deepscaler", __doc__.splitlines()[0]).parse_args()
    setup_logging()
    splits = read_local_source(args.source_dir) if args.source_dir else read_hub_source(DATA_SOURCE)
    for split, rows in splits.items():
        require_fields(rows, ("problem", "answer"), f"{args.source_dir or DATA_SOURCE} {split}")
    splits = hold_out_test(splits, args.test_size, args.seed)
    convert_and_write(splits, make_row, args.local_dir)


if __name__ == "__main__":
    main()
