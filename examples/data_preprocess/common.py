"""Shared parts of the preprocessing scripts: reading the source (hub or local file), splitting, writing parquet.

Every script writes `<local_dir>/train.parquet` and `<local_dir>/test.parquet` in the verl/siiRL schema:
`data_source`, `prompt` (chat list), `ability`, `reward_model{style, ground_truth}`,
`extra_info{split, index, answer, question}`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any, Callable, NoReturn

import numpy as np

logger = logging.getLogger(__name__)

SOURCE_SUFFIXES = (".jsonl", ".json", ".parquet")


def schema_row(
    data_source: str,
    prompt: list[dict[str, str]],
    ability: str,
    ground_truth: str,
    split: str,
    index: int,
    answer: str,
    question: str,
) -> dict[str, Any]:
    """One row in the verl/siiRL schema every dagrl dataset uses."""
    return {
        "data_source": data_source,
        "prompt": prompt,
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def fail(message: str) -> NoReturn:
    """One-line error for the user, exit code 2 (bad input), no traceback."""
    sys.stderr.write(f"error: {message}\n")
    raise SystemExit(2)


def base_parser(name: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--local_dir", default=f"~/data/{name}", help=f"output directory (default ~/data/{name})")
    parser.add_argument(
        "--source_dir",
        default=None,
        help="read a local jsonl/json/parquet file, or a directory with train.* and test.* files, "
        "instead of the hub (for offline clusters)",
    )
    parser.add_argument(
        "--test_size",
        type=int,
        default=None,
        help="rows held out for test when the source has no test split (default: 10%% of the rows, at most 500)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the held-out split")
    return parser


def read_records(path: str) -> list[dict[str, Any]]:
    """Rows of one jsonl, json (a list of objects) or parquet file."""
    try:
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        with open(path, encoding="utf-8") as handle:
            if path.endswith(".jsonl"):
                records = [json.loads(line) for line in handle if line.strip()]
            else:
                records = json.load(handle)
    except (OSError, ValueError) as error:  # json.JSONDecodeError and pyarrow's ArrowInvalid are ValueErrors
        fail(f"cannot read {path!r}: {str(error).strip().splitlines()[0] if str(error).strip() else error!r}")
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        fail(f"{path!r} must hold a list of objects (one per row)")
    return records


def _find_split_file(directory: str, split: str) -> str | None:
    for suffix in SOURCE_SUFFIXES:
        path = os.path.join(directory, split + suffix)
        if os.path.isfile(path):
            return path
    return None


def read_local_source(source: str) -> dict[str, list[dict[str, Any]]]:
    """{"train": rows, "test": rows?} from a file (train only) or a directory with train.* / test.* files."""
    source = os.path.expanduser(source)
    if os.path.isdir(source):
        train_path = _find_split_file(source, "train")
        if train_path is None:
            fail(f"--source_dir {source!r} holds no train{{{','.join(SOURCE_SUFFIXES)}}} file")
        splits = {"train": read_records(train_path)}
        test_path = _find_split_file(source, "test")
        if test_path is not None:
            splits["test"] = read_records(test_path)
        return splits
    if not os.path.isfile(source):
        fail(f"--source_dir {source!r} does not exist")
    if not source.endswith(SOURCE_SUFFIXES):
        fail(f"--source_dir {source!r} is not a {'/'.join(SOURCE_SUFFIXES)} file")
    return {"train": read_records(source)}


def read_hub_source(name: str, config: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """All splits of a hub dataset, through `datasets` (imported only here)."""
    try:
        import datasets
    except ImportError:
        fail(
            f'reading {name} from the hub needs the `datasets` package: pip install -e ".[datasets]" '
            "(or pip install datasets), or pass --source_dir FILE"
        )
    loaded = datasets.load_dataset(name, config) if config else datasets.load_dataset(name)
    return {split: loaded[split].to_list() for split in loaded}


def hold_out_test(splits: dict[str, list[dict]], test_size: int | None, seed: int) -> dict[str, list[dict]]:
    """Adds a seeded held-out test split taken from train when the source has none."""
    if "test" in splits:
        return splits
    rows = splits["train"]
    if test_size is None:
        test_size = min(500, max(1, len(rows) // 10))
    plural = "row" if len(rows) == 1 else "rows"
    if len(rows) < 2:
        fail(
            f"the source has {len(rows)} {plural} and no test split: holding out --test_size {test_size} leaves no "
            f"training rows; give a source with at least 2 rows (or a test.* file next to train.*)"
        )
    if test_size >= len(rows):
        fail(
            f"the source has {len(rows)} {plural}: --test_size {test_size} leaves no training rows; lower "
            f"--test_size to at most {len(rows) - 1} or give more rows"
        )
    if test_size < 1:
        fail(f"--test_size {test_size} must be at least 1 (rows held out for test; the source has {len(rows)} rows)")
    order = np.random.default_rng(seed).permutation(len(rows))
    logger.info("no test split in the source: holding out %d of %d rows (seed %d)", test_size, len(rows), seed)
    return {"train": [rows[i] for i in sorted(order[test_size:])], "test": [rows[i] for i in sorted(order[:test_size])]}


def require_fields(rows: list[dict], fields: tuple[str, ...], where: str) -> None:
    for index, row in enumerate(rows):
        for field in fields:
            if row.get(field) is None:
                fail(f"{where} row {index} lacks the field {field!r} (each row needs {', '.join(fields)})")


def convert_and_write(
    splits: dict[str, list[dict]], make_row: Callable[[dict, str, int], dict], local_dir: str
) -> dict[str, str]:
    """Converts every split with `make_row(raw, split, index)` and writes `<local_dir>/<split>.parquet`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    local_dir = os.path.expanduser(local_dir)
    os.makedirs(local_dir, exist_ok=True)
    written = {}
    for split in ("train", "test"):
        rows = [make_row(raw, split, index) for index, raw in enumerate(splits[split])]
        if not rows:
            fail(f"the {split} split is empty")
        path = os.path.join(local_dir, f"{split}.parquet")
        pq.write_table(pa.Table.from_pylist(rows), path)
        logger.info("wrote %d rows to %s", len(rows), path)
        written[split] = path
    return written


def extract_last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (or \\fbox{...}) in `text`, braces balanced; None if there is none."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    rest = text[start:]
    if rest.startswith("\\boxed "):  # "\boxed 5": the answer runs to the next "$" or end
        return rest[len("\\boxed ") :].split("$")[0].strip()
    open_at = rest.find("{")
    if open_at < 0:
        return None
    depth = 0
    for position in range(open_at, len(rest)):
        depth += {"{": 1, "}": -1}.get(rest[position], 0)
        if depth == 0:
            return rest[open_at + 1 : position]
    return None


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
