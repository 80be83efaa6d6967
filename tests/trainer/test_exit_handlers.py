"""dagrl.main_dag freezes the garbage collector at exit, after the exit handlers registered during the run: a sink
that finishes in its own exit handler (wandb's and mlflow's register one when they start) still writes its last
step, and only the interpreter's teardown is left uncollected."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# main() with the run replaced by one whose sinks are finished only by the exit handlers it registers, each held
# by a reference cycle (nothing else flushes them: a collection at teardown is what gc.freeze skips); a handler
# registered before main() runs after every one of the run's and reports whether the collector was frozen
RUN = """
import atexit, gc, sys
from torch.utils.tensorboard import SummaryWriter
from dagrl import main_dag

BOARD, ROWS = sys.argv[1:3]

def run(cfg_data):
    writer = SummaryWriter(log_dir=BOARD, flush_secs=3600, max_queue=1000)  # events queued until close
    rows = open(ROWS, "w", encoding="utf-8", buffering=1 << 20)
    for step in (1, 2, 3):
        writer.add_scalar("x", float(step), step)
        rows.write(f"{step}\\n")
    writer.cycle, rows_holder = writer, [rows]
    rows_holder.append(rows_holder)
    atexit.register(writer.close)
    atexit.register(rows_holder[0].close)

atexit.register(lambda: print(f"frozen at exit: {gc.get_freeze_count()}", file=sys.stderr))
main_dag.run = run
sys.argv[1:] = ["trainer.total_training_steps=3"]
main_dag.main()
"""


def test_the_runs_exit_handlers_finish_their_sinks_before_gc_is_frozen(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board, rows = tmp_path / "tensorboard", tmp_path / "rows.txt"
    proc = subprocess.run(
        [sys.executable, "-c", RUN, str(board), str(rows)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    frozen = [line for line in proc.stderr.splitlines() if line.startswith("frozen at exit: ")]
    assert frozen and int(frozen[-1].split(": ")[1]) > 0, proc.stderr[-3000:]  # teardown ran with gc frozen
    assert rows.read_text().split() == ["1", "2", "3"]
    events = EventAccumulator(str(board))
    events.Reload()
    assert [(event.step, event.value) for event in events.Scalars("x")] == [(1, 1.0), (2, 2.0), (3, 3.0)]
