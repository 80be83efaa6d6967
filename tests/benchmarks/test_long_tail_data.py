"""benchmarks/long_tail_data.py: the copy's rows carry seeded long-tailed limits that the trainer's dataset and rollout
node read back, the rest of each row and test.parquet unchanged."""

import filecmp
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from dagrl.data.dataset import PromptDataset
from dagrl.nodes.common import response_limits

ROOT = Path(__file__).resolve().parents[2]


def test_limits_are_written_seeded_and_read_back(tiny_data, tiny_model, tmp_path):
    from transformers import AutoTokenizer

    src = Path(tiny_data["train"]).parent

    def draw(dst: Path, seed: int) -> str:
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "benchmarks/long_tail_data.py"),
                "--src",
                str(src),
                "--dst",
                str(dst),
                "--mean",
                "64",
                "--max",
                "512",
                "--seed",
                str(seed),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.split(": ", 1)[1]  # the statistics, after the path

    summary = draw(tmp_path / "a", 0)
    assert draw(tmp_path / "b", 0) == summary != draw(tmp_path / "c", 1)  # seeded
    assert "mean" in summary and "p99" in summary and summary.count("\n") == 1
    before, after = pq.read_table(src / "train.parquet"), pq.read_table(tmp_path / "a" / "train.parquet")
    assert after.drop(["extra_info"]).equals(before.drop(["extra_info"]))
    infos = after.column("extra_info").to_pylist()
    assert [{k: v for k, v in i.items() if k != "max_response_length"} for i in infos] == before.column(
        "extra_info"
    ).to_pylist()
    limits = [i["max_response_length"] for i in infos]
    assert all(16 <= n <= 512 for n in limits) and len(set(limits)) > len(limits) // 2
    assert filecmp.cmp(src / "test.parquet", tmp_path / "a" / "test.parquet", shallow=False)
    data = PromptDataset(
        [str(tmp_path / "a" / "train.parquet")], AutoTokenizer.from_pretrained(tiny_model), max_prompt_length=32
    )
    assert response_limits(data.rows([0, 1, 2]), 100) == tuple(min(n, 100) for n in limits[:3])
