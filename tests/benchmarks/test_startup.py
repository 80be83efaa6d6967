"""benchmarks/startup.py: three launches of one run (fresh, a resume with an empty vLLM cache, a resume with the
run's own), each training exactly one more step, and the launch-to-step-start figures read from metrics.jsonl."""

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import cpu_run_overrides

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import startup  # noqa: E402 - after the sys.path insert above


def test_three_launches_resume_one_step_each(tmp_path, tiny_model, tiny_data):
    """On a CPU (hf rollout, so no vLLM cache and no cache_dir, which pre-flight refuses there): the overrides resume
    the same run twice, and the report has one row per launch with a time before the
    step that is positive and shorter than the launch's wall time."""
    base = [
        w
        for w in cpu_run_overrides(tiny_model, tiny_data, tmp_path / "unused")
        if not w.startswith(("trainer.total_training_steps=", "trainer.default_local_dir="))
    ]
    out = tmp_path / "bench"
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/startup.py",
            "--out",
            str(out),
            "--hf",
            "--",
            sys.executable,
            "-m",
            "dagrl.main_dag",
            *base,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3]  # each launch trained one step, none twice
    assert "resumed from" in (out / "warm.log").read_text()
    table = [line for line in proc.stdout.splitlines() if line.startswith(("| fresh", "| cold", "| warm"))]
    assert len(table) == 3
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")]
        before_step, wall, rc = float(cells[2]), float(cells[8]), cells[9]
        assert rc == "0" and 0 < before_step < wall
        phases = sum(float(x) for x in cells[3].split(" / ")) + float(cells[4])  # ("ready in" is whole seconds)
        assert phases < before_step + 0.5  # the phases lie within the time before the step


def test_report_reads_engine_start_and_first_step(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "fresh.json").write_text(json.dumps({"launch": "fresh", "rc": 0, "launched": 1000.0, "wall_s": 90.0}))
    (tmp_path / "fresh.log").write_text(
        "start-up: 0.4 s composing the config, 2.5 s of pre-flight, 9.1 s importing "
        "the trainer and joining the process group\nx vLLM engine up in 61.5 s (TP=1)\n"
        "y vLLM engine up in 60.2 s (TP=1)\nready in 70 s\n"
    )
    (tmp_path / "run" / "metrics.jsonl").write_text(
        json.dumps({"step": 1, "time": 1080.0, "timing_s/step": 5.0, "timing_s/rollout_switch": 1.25})
    )
    line = startup.report(tmp_path).splitlines()[2]
    assert line == "| fresh | nothing (new run) | 75.0 | 0.4 / 2.5 / 9.1 | 70 | 61.5/60.2 | 5.00 | 1.25 | 90.0 | 0 |"
