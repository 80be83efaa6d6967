"""GSM8K with the calculator tool offered -> train/test parquet for multi-turn rollouts (verl/siiRL schema).

    python3 examples/data_preprocess/gsm8k_tool.py --local_dir ~/data/gsm8k_tool
    python3 examples/data_preprocess/gsm8k_tool.py --source_dir gsm8k_dir/   # offline: train.jsonl + test.jsonl
Rows are gsm8k.py's (same question, instruction and "#### <answer>" ground truth, scored strictly) plus a system
prompt offering the calculator and `extra_info.tools_kwargs` for it.
"""

from __future__ import annotations

import gsm8k
from common import (
    base_parser,
    convert_and_write,
    hold_out_test,
    read_hub_source,
    read_local_source,
    require_fields,
    setup_logging,
)
from products import CALCULATOR_HOWTO, tools_kwargs

SYSTEM_PROMPT = (
    "You are a math expert. Solve the problem step by step. You can use a calculator tool for any arithmetic. "
    f"{CALCULATOR_HOWTO} Put your final answer in the format of `#### <answer>`."
)


def make_row(raw: dict, split: str, index: int) -> dict:
    row = gsm8k.make_row(raw, split, index)
    row["prompt"] = [{"role": "system", "content": SYSTEM_PROMPT}, *row["prompt"]]
    row["extra_info"].update(need_tools_kwargs=True, tools_kwargs=tools_kwargs(row["reward_model"]["ground_truth"]))
    return row


def main() -> None:
    args = base_parser("gsm8k_tool", __doc__.splitlines()[0]).parse_args()
    setup_logging()
    splits = read_local_source(args.source_dir) if args.source_dir else read_hub_source(gsm8k.DATA_SOURCE, "main")
    for split, rows in splits.items():
        require_fields(rows, ("question", "answer"), f"{args.source_dir or gsm8k.DATA_SOURCE} {split}")
    splits = hold_out_test(splits, args.test_size, args.seed)
    convert_and_write(splits, make_row, args.local_dir)


if __name__ == "__main__":
    main()
