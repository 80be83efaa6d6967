from __future__ import annotations

import shutil
from pathlib import Path

from tests.reliability.corpus.case import Case, Paths


def copied_val(ws: Path, paths: Paths) -> None:
    """{ws}/val.parquet: the training file copied under another name (`cp train.parquet val.parquet`)."""
    shutil.copy(paths.train, ws / "val.parquet")


TOPIC = "Held-out data that is not held out"
CASES: tuple[Case, ...] = (
    Case(
        "val_files_copy_of_train",
        "`data.val_files` names a copy of the training file under another name: validation would score trained "
        "prompts and read as generalisation",
        ("data.val_files={ws}/val.parquet",),
        ("data.val_files has <tmp>/val.parquet, a byte-for-byte copy of <data>/train.parquet", "held-out rows"),
        make=copied_val,
    ),
)
