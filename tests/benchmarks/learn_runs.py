"""What the tests of the learning benchmarks (benchmarks/*_learn.py) share: the scripts' directory on sys.path, as
the scripts import their siblings; an arm's run directory as a run leaves it; the refusal of an unknown --arms name."""

import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def write_run(directory: Path, rows: list[dict]) -> None:
    """`rows` as the run's metrics.jsonl (DIR/<arm>_seed<S>/ckpt/metrics.jsonl)."""
    (directory / "ckpt").mkdir(parents=True)
    (directory / "ckpt" / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def assert_unknown_arm_refused(benchmark: ModuleType, out: Path, known: str) -> None:
    """`--arms KNOWN,nope` exits naming the unknown arm and the choices before any run starts."""
    with pytest.raises(SystemExit) as refused:
        benchmark.main(["--out", str(out), "--arms", f"{known},nope"])
    assert str(refused.value.code).startswith("--arms: unknown ['nope']; choose from ") and known in refused.value.code
    assert list(out.iterdir()) == []
