"""Opening one data file: every way a path can fail to be a readable parquet file (missing, a broken link, a
directory, a FIFO, JSON or CSV, a list of paths, corrupt) becomes a one-line ValueError naming the file and the fix;
and reading one column of it, page by page. Imports neither torch nor transformers.
"""

from __future__ import annotations

import os
import stat

import pyarrow as pa
import pyarrow.parquet as pq

PREPROCESS = "examples/data_preprocess/*.py"


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def open_parquet(path: str) -> pq.ParquetFile:
    """Opens one data file, turning every way it can be unusable into a one-line ValueError. A FIFO, socket or
    device is refused from its stat, before anything opens it (opening a FIFO waits for a writer forever)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            raise ValueError(
                f"data file {path!r} is a broken symlink (to {os.readlink(path)!r}, which does not "
                f"exist); fix the link or data.train_files / data.val_files"
            ) from None
        raise ValueError(
            f"data file {path!r} does not exist; fix data.train_files / data.val_files (preprocess with {PREPROCESS})"
        ) from None
    except OSError as error:
        raise ValueError(
            f"data file {path!r} cannot be read ({first_line(error)}); fix data.train_files / data.val_files"
        ) from None
    if stat.S_ISDIR(mode):
        raise ValueError(directory_problem(path))
    if not stat.S_ISREG(mode):
        kind = (
            "a FIFO (named pipe)"
            if stat.S_ISFIFO(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file"
        )
        raise ValueError(
            f"data file {path!r} is {kind}, not a regular file (parquet is read by seeking to its "
            f"footer); write the data to a .parquet file and point data.train_files / data.val_files "
            f"at it"
        )
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as error:
        suffix = os.path.splitext(path)[1].lower()
        if suffix in (".json", ".jsonl", ".csv"):  # not parquet by name: say how to convert it
            reader = "read_csv" if suffix == ".csv" else "read_json"
            lines = ", lines=True" if suffix == ".jsonl" else ""
            raise ValueError(
                f"data file {path!r} is a {suffix[1:]} file, but data.train_files / data.val_files take "
                f"parquet files only: convert it (pandas.{reader}({path!r}{lines}).to_parquet(...)) or "
                f"regenerate it with {PREPROCESS}"
            ) from error
        listed = _listed_paths(path)
        if listed:  # a text file naming the data files (one a line): the list goes into the config itself
            raise ValueError(
                f"data file {path!r} is a text file listing data files ({listed[0]!r}, ...), not "
                f"parquet: give the list itself, e.g. data.train_files='[{','.join(listed[:2])}"
                f"{',...' if len(listed) > 2 else ''}]'"
            ) from error
        raise ValueError(
            f"data file {path!r} is not a readable parquet file ({first_line(error)}); regenerate it with {PREPROCESS}"
        ) from error


def directory_problem(path: str) -> str:
    """The line for a data path that is a directory: what it holds decides the fix (the part files of a
    partitioned parquet dataset, a datasets save_to_disk folder, or nothing known)."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        names = []
    parts = [os.path.join(path, name) for name in names if name.endswith(".parquet")]
    splits = split_files(parts)
    if splits:  # a data set's folder (preprocess output, a hub snapshot's data/): pointing at it mixes the splits
        train, val = (",".join(files) if len(files) == 1 else f"'[{','.join(files)}]'" for files in splits)
        return (
            f"data file {path!r} is a directory holding a data set's splits ({', '.join(map(os.path.basename, parts))}"
            f"), not one split: name each, data.train_files={train} data.val_files={val}"
        )
    if parts:  # Spark's or pandas' partitioned output: train.parquet/part-00000-....parquet
        shown = ",".join(parts[:2]) + (",..." if len(parts) > 2 else "")
        return (
            f"data file {path!r} is a directory of {len(parts)} parquet part file(s) (a partitioned dataset); "
            f"data.train_files / data.val_files take files: list them, e.g. data.train_files='[{shown}]'"
        )
    if {"dataset_info.json", "state.json", "dataset_dict.json"} & set(names):
        split = "['train']" if "dataset_dict.json" in names else ""
        return (
            f"data file {path!r} is a Hugging Face datasets folder (save_to_disk's Arrow shards), not parquet: "
            f"convert it with datasets.load_from_disk({path!r}){split}.to_parquet('train.parquet') and point "
            f"data.train_files / data.val_files at that file"
        )
    return (
        f"data file {path!r} is a directory; data.train_files / data.val_files take parquet files (e.g. "
        f"{os.path.join(path, 'train.parquet')!r})"
    )


TRAIN_SPLIT, HELD_OUT_SPLITS = "train", ("test", "val", "validation", "valid", "dev", "eval")


def split_files(files: list[str]) -> tuple[list[str], list[str]] | None:
    """(training files, held-out files) when `files` are named by split (train.parquet and test.parquet, or the
    hub's train-00000-of-00002.parquet and test-00000-of-00001.parquet), else None."""
    train: list[str] = []
    held_out: list[str] = []
    for file in files:
        split = os.path.basename(file).removesuffix(".parquet").split("-")[0].lower()
        if split == TRAIN_SPLIT:
            train.append(file)
        elif split in HELD_OUT_SPLITS:
            held_out.append(file)
    return (train, held_out) if train and held_out else None


def _listed_paths(path: str) -> list[str]:
    """The lines of a small text file when each names a .parquet file, else []."""
    try:
        with open(path, "rb") as handle:
            lines = handle.read(65536).decode("utf-8").split()
    except (OSError, UnicodeDecodeError):
        return []
    return lines if lines and all(line.endswith(".parquet") for line in lines) else []


def corrupt(path: str, error: BaseException) -> ValueError:
    return ValueError(f"data file {path!r} is corrupt: its rows cannot be read ({first_line(error)}); regenerate it")


def column_batches(path: str, column: str):
    """Record batches of one column (or nested field, `a.b`) of a data file: only its pages are read."""
    parquet = open_parquet(path)
    try:
        yield from parquet.iter_batches(batch_size=65536, columns=[column])
    except (pa.ArrowException, OSError) as error:
        raise corrupt(path, error) from error
