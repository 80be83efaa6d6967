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
    (out / name / "metrics.jsonl").write_text(
        "\n".join(json.dumps({"step": i + 1, **row}) for i, row in enumerate(rows))
    )


def test_model_prime_uses_the_training_pools_own_seconds(tmp_path):
    shape = {"response_length/mean": 100.0, "response_length/max": 100.0, "prompt_length/mean": 50.0}
    # colocated on 2 processes: 1 s generating, 2 s training a step
    write_run(tmp_path, "plain", [{**shape, "timing_s/step": 3.0, "timing_s/gen": 1.0}] * 4)
    # 1 + 1 pools, K=1: the lone trainer takes 2.5 s a step (linear scaling from 2 GPUs would say 4 s)
    write_run(
        tmp_path, "pools1", [{**shape, "timing_s/step": 2.5, "timing_s/trainer_wait": 0.0, "timing_s/gen": 0.5}] * 4
    )
    out = subprocess.run(
        [
            sys.executable,
            "benchmarks/async_pipeline.py",
            "--model",
            "m",
            "--data",
            "d",
            "--report",
            "--out",
            str(tmp_path),
            "--runs",
            "plain,pools1",
            "--batch",
            "4",
            "--n",
            "2",
            "--nproc",
            "2",
            "--rollout-procs",
            "1",
            "--steps",
            "4",
            "--response-length",
            "100",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    row = next(line for line in out.splitlines() if line.startswith("| pools1 |")).split("|")
    train_s, model, model_own = float(row[4]), float(row[-3]), float(row[-2])
    assert train_s == pytest.approx(2.5)
    assert model == pytest.approx(4.0, rel=0.05)  # training-bound at plain's per-GPU rate on one GPU
    assert model_own == pytest.approx(2.5, rel=0.05)  # training-bound at the pool's own rate


def test_keep_stale_turns_restarts_off_in_the_partial_runs_and_in_the_model(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from async_pipeline import overrides_of

    import argparse

    args = argparse.Namespace(oversample=2.0, staleness=1, rollout_procs=1, nproc=2, keep_stale=True)
    assert "async_training.restart_stale=false" in overrides_of("pools2p", args)
    assert "async_training.restart_stale=false" in overrides_of("partial", args)
    assert not any("restart_stale" in o for o in overrides_of("pools2", args))  # refused without partial rollout
    assert not any(
        "restart_stale" in o for o in overrides_of("pools2p", argparse.Namespace(**{**vars(args), "keep_stale": False}))
    )
    # the model: a long-tailed plain run and a K=0 partial run, whose long groups restart forever unless kept
    rows = [
        {
            "response_length/mean": 300.0 + 40 * i,
            "response_length/max": 2000.0 - 300 * i,
            "prompt_length/mean": 30.0,
            "timing_s/step": 12.0 - i,
            "timing_s/gen": 9.0 - i,
        }
        for i in range(4)
    ]
    write_run(tmp_path, "plain", rows)

    def report(*flags):
        rest = "--runs plain,pools0p --batch 8 --n 2 --nproc 2 --rollout-procs 1 --steps 8 --response-length 2048"
        argv = [sys.executable, "benchmarks/async_pipeline.py", "--model", "m", "--data", "d", "--report", "--out"]
        argv += [str(tmp_path), *rest.split(), "--long-tail", "256,2048", *flags]
        return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True).stdout

    def step(out):
        return float(next(line for line in out.splitlines() if line.startswith("| pools0p |")).split("|")[-3])

    restarted, kept = report(), report("--keep-stale")
    assert "stale groups restarted" in restarted and "stale groups kept" in kept
    assert step(kept) != pytest.approx(step(restarted), rel=1e-3)
