"""benchmarks/async_pipeline.py --report: the model's step beside each run, from plain's rates (training scaled by
GPU count) and from the training pool's own measured seconds (model'), which is what a small model needs."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def write_run(out: Path, name: str, rows: list[dict]) -> None:
    (out / name).mkdir(parents=True)
    (out / name / "metrics.jsonl").write_text("\n".join(json.dumps({"step": i + 1, **row}) for i, row in enumerate(rows)))


def test_model_prime_uses_the_training_pools_own_seconds(tmp_path):
    shape = {"response_length/mean": 100.0, "response_length/max": 100.0, "prompt_length/mean": 50.0}
    # colocated on 2 processes: 1 s generating, 2 s training a step
    write_run(tmp_path, "plain", [{**shape, "timing_s/step": 3.0, "timing_s/gen": 1.0}] * 4)
    # 1 + 1 pools, K=1: the lone trainer takes 2.5 s a step (linear scaling from 2 GPUs would say 4 s)
    write_run(tmp_path, "pools1", [{**shape, "timing_s/step": 2.5, "timing_s/trainer_wait": 0.0,
                                    "timing_s/gen": 0.5}] * 4)
    out = subprocess.run([sys.executable, "benchmarks/async_pipeline.py", "--model", "m", "--data", "d", "--report",
                          "--out", str(tmp_path), "--runs", "plain,pools1", "--batch", "4", "--n", "2", "--nproc", "2",
                          "--rollout-procs", "1", "--steps", "4", "--response-length", "100"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    row = next(line for line in out.splitlines() if line.startswith("| pools1 |")).split("|")
    train_s, model, model_own = float(row[4]), float(row[-3]), float(row[-2])
    assert train_s == pytest.approx(2.5)
    assert model == pytest.approx(4.0, rel=0.05)  # training-bound at plain's per-GPU rate on one GPU
    assert model_own == pytest.approx(2.5, rel=0.05)  # training-bound at the pool's own rate
