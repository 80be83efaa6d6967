"""trainer.parity_check=true: the doctor's numerics run inside a training run before step 1, on the run's own
engines, and its figures are logged with step 1 (each documented in docs/metrics.md)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import cpu_run_overrides
from tests.helpers import metrics_by_step, undocumented_metrics


def test_a_run_logs_the_doctor_figures_with_step_one(tiny_model, tiny_data, tmp_path):
    out = tmp_path / "out"
    overrides = cpu_run_overrides(
        tiny_model,
        tiny_data,
        out,
        **{"trainer.parity_check": True, "trainer.total_training_steps": 2, "trainer.val_before_train": False},
    )
    done = subprocess.run([sys.executable, "-m", "dagrl.main_dag", *overrides], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "verdict: the weights map exactly" in done.stderr
    steps = metrics_by_step(out)
    first, second = steps[1], steps[2]
    assert first["doctor/ok"] == 1.0 and first["doctor/weights_inexact"] == 0.0
    assert 0 < first["doctor/actor_vs_hf_mean"] <= 4 * first["doctor/floor_fp32"]
    assert not any(key.startswith("doctor/") for key in second)  # once, before training
    assert undocumented_metrics(out) == []
