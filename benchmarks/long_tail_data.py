"""A long-tailed response-length workload from an existing data set: every train row gets its own
`extra_info.max_response_length`.

usage: python3 benchmarks/long_tail_data.py --src DIR --dst DIR [--mean 1024] [--max 8192] [--seed 0]

Reads DIR/train.parquet (e.g. what examples/data_preprocess/arithmetic.py writes) and writes DST/train.parquet with
each row's limit drawn from async_model.long_tail_lengths: lognormal(mu, sigma=1), rounded and clipped to
[16, --max], mu set so the clipped mean is --mean (for 1024 / 8192 about 0.5 % of rows sit at 8192). The other
columns and extra_info's other keys are kept; DIR/test.parquet, if present, is copied untouched (validation keeps
data.max_response_length). A random-weight model never stops on its own, so these limits are the response lengths;
train with data.max_response_length >= --max, which caps every row's limit.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.async_model import long_tail_lengths


def with_limits(table: pa.Table, limits: np.ndarray) -> pa.Table:
    """`table` with each row's extra_info carrying its limit (a column the file lacks is added)."""
    old = table.column("extra_info").to_pylist() if "extra_info" in table.column_names else [None] * len(table)
    column = pa.array([{**(info or {}), "max_response_length": int(limit)} for info, limit in zip(old, limits)])
    if "extra_info" in table.column_names:
        return table.set_column(table.column_names.index("extra_info"), "extra_info", column)
    return table.append_column("extra_info", column)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", required=True, type=Path, help="directory with train.parquet (and test.parquet)")
    parser.add_argument("--dst", required=True, type=Path, help="directory to write the copies to")
    parser.add_argument("--mean", type=float, default=1024, help="mean of the drawn limits (tokens)")
    parser.add_argument("--max", type=int, default=8192, help="largest limit (tokens)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    table = pq.read_table(args.src / "train.parquet")
    limits = long_tail_lengths(np.random.default_rng(args.seed), len(table), mean=args.mean, max_len=args.max)
    args.dst.mkdir(parents=True, exist_ok=True)
    pq.write_table(with_limits(table, limits), args.dst / "train.parquet")
    if (args.src / "test.parquet").exists():
        shutil.copyfile(args.src / "test.parquet", args.dst / "test.parquet")
    p50, p90, p99 = np.percentile(limits, [50, 90, 99])
    print(
        f"{len(limits)} rows -> {args.dst / 'train.parquet'}: extra_info.max_response_length "
        f"mean {limits.mean():.0f} p50 {p50:.0f} p90 {p90:.0f} p99 {p99:.0f} max {limits.max():.0f}"
    )


if __name__ == "__main__":
    main()
