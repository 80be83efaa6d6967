"""A colocated rollout engine sleeps from its construction until the first rollout wakes it, so that a resume's
checkpoint load has the engine's memory: on one H100 a Qwen3-1.7B resume beside an awake vLLM at
gpu_memory_utilization=0.5 ran out of memory loading the optimizer state (session 18)."""
import subprocess
import sys
from pathlib import Path

from tests.conftest import cpu_run_overrides

ROOT = Path(__file__).resolve().parents[2]


def run_recording(events: Path, overrides: list[str]) -> list[str]:
    proc = subprocess.run([sys.executable, "tests/trainer/colocated_events.py", str(events), *overrides], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = events.read_text().split()
    events.unlink()
    return lines


def test_engine_sleeps_before_the_checkpoint_loads_and_wakes_for_each_rollout(tmp_path, tiny_model, tiny_data):
    out = tmp_path / "run"
    fresh = run_recording(tmp_path / "events", cpu_run_overrides(tiny_model, tiny_data, out,
                                                                 **{"trainer.total_training_steps": 1,
                                                                    "trainer.val_before_train": False, "trainer.save_freq": 1}))
    # asleep from the start; each rollout: wake the weights (then sync), wake the cache, sleep again
    assert fresh == ["sleep", "wake_weights", "wake_cache", "sleep"]
    resumed = run_recording(tmp_path / "events", cpu_run_overrides(tiny_model, tiny_data, out,
                                                                   **{"trainer.total_training_steps": 2,
                                                                      "trainer.val_before_train": False, "trainer.save_freq": 1}))
    assert resumed[:2] == ["sleep", "load_checkpoint"], resumed
    assert resumed[2:] == ["wake_weights", "wake_cache", "sleep"]
