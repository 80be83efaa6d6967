"""What the console says while a run goes: each step line's time left (from step 1, validations counted by the
schedule), progress lines of a long phase, the jsonl and TensorBoard rows a relaunch drops, and the summary of a
run stopped early."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest

from dagrl.trainer import timing, tracking
from dagrl.trainer.timing import Progress, duration
from dagrl.trainer.tracking import Tracker


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(tracking, "_now", fake)
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=fake))
    return fake


def test_durations_read_at_the_precision_they_deserve():
    assert [duration(s) for s in (0, 40.2, 59.4, 60, 89, 91, 1290, 3570, 3600, 21900)] == [
        "0s",
        "40s",
        "59s",
        "1m",
        "1m",
        "2m",
        "22m",
        "1h00m",
        "1h00m",
        "6h05m",
    ]


def step_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("step:")]


def test_each_step_line_ends_with_the_time_left_counting_the_validations_to_come(clock, capsys):
    tracker = Tracker(
        "p",
        "e",
        ["console"],
        None,
        None,
        total_steps=10,
        start_step=0,
        enabled=True,
        validates=lambda step: step % 5 == 0,
    )
    clock.advance(30)  # step 0's validation
    tracker.log({"val-core/d/acc/mean@1": 0.1}, 0)
    clock.advance(12)
    tracker.log({"training/global_step": 1.0, "critic/score/mean": 0.5}, 1)
    # 9 steps of 12 s, and steps 5 and 10 validate for 30 s each: 168 s
    assert step_lines(capsys)[-1] == "step:1 - critic/score/mean:0.5 - 1/10 steps, eta 3m"
    for step in range(2, 5):
        clock.advance(12)
        tracker.log({"training/global_step": float(step)}, step)
    clock.advance(32)  # 12 s of step and 20 s of validation: the mean validation is now 25 s
    tracker.log({"training/global_step": 5.0, "timing_s/testing": 20.0, "val-core/d/acc/mean@1": 0.2}, 5)
    lines = step_lines(capsys)
    assert lines[-1].endswith(" - 5/10 steps, eta 1m")  # 5 x 12 s + 1 x 25 s = 85 s
    assert lines[-2].endswith(" - 4/10 steps, eta 2m")  # 6 x 12 + 2 x 30 = 132 s
    tracker.close()


def test_without_a_schedule_the_time_left_is_the_mean_wall_time_of_a_step(clock, capsys):
    tracker = Tracker("p", "e", ["console"], None, None, total_steps=100, start_step=40, enabled=True)
    for step, seconds in ((41, 50), (42, 70)):
        clock.advance(seconds)
        tracker.log({"training/global_step": float(step)}, step)
    assert step_lines(capsys)[-1] == "step:42 - 42/100 steps, eta 58m"  # 58 x 60 s
    tracker.close()


def test_a_run_stopped_early_says_in_its_summary_how_long_the_rest_would_take(clock):
    tracker = Tracker("p", "e", [], None, None, total_steps=10, start_step=0, enabled=True)
    for step in (1, 2):
        clock.advance(90)
        tracker.log({"training/global_step": float(step)}, step)
    first = tracker.summary(10, "ckpts", None, None).splitlines()[0]
    assert first.startswith("run summary: steps 1..2 of 10 in ") and first.endswith("; about 12m more to step 10)")
    tracker.close()


def test_a_long_phase_shows_its_progress_at_a_modest_rate_and_a_short_one_says_nothing(clock):
    said: list[str] = []

    def say(message, *args):
        said.append(message % args)

    progress = Progress("validation (step 0)", 256, "prompts", say)
    for done, seconds in ((64, 5), (128, 36), (192, 4)):
        clock.advance(seconds)
        progress.update(done)
    clock.advance(63)
    progress.finish()
    assert said == [
        "validation (step 0): 128/256 prompts, 41 s, about 41 s left",  # 64 was at 5 s, 192 4 s later
        "validation (step 0): 256 prompts in 108 s",
    ]

    said.clear()
    short = Progress("validation (step 5)", 256, "prompts", say)
    for done in (64, 128, 192):
        clock.advance(3)
        short.update(done)
    short.finish()
    assert said == []


def rows_of(path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


@pytest.mark.parametrize(
    "keep_through,message",
    [
        (-1, "dropped 6 row(s) of steps 0..5, written by a run that left no checkpoint: they run again"),
        (3, "dropped 2 row(s) of steps 4..5, written after the checkpoint of step 3: they run again"),
        (4, "dropped 1 row(s) of step 5, written after the checkpoint of step 4: they run again"),
    ],
)
def test_a_relaunch_says_which_rows_it_drops_and_why(tmp_path, caplog, keep_through, message):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": step, "x": 1.0}) + "\n" for step in range(6)))
    with caplog.at_level(logging.INFO, logger="dagrl.trainer.tracking"):
        Tracker("p", "e", ["jsonl"], None, str(path), 10, 0, enabled=True, keep_through=keep_through).close()
    assert rows_of(path) == list(range(keep_through + 1))
    [said] = [record.getMessage() for record in caplog.records if "dropped" in record.getMessage()]
    assert said == f"{path}: {message}" and "step -1" not in said


def tensorboard_points(directory) -> dict[int, float]:
    """{step: value} of the scalar "x" as TensorBoard's own reader sees the directory."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(directory))
    events.Reload()
    points = [(event.step, event.value) for event in events.Scalars("x")]
    assert len({step for step, _ in points}) == len(points), f"a step shown twice: {points}"
    return dict(points)


@pytest.mark.parametrize("keep_through", [3, -1], ids=["resumed_from_step_3", "started_over"])
def test_tensorboard_hides_the_steps_of_the_killed_run_that_run_again(tmp_path, keep_through):
    pytest.importorskip("tensorboard")
    board = str(tmp_path / "tensorboard")
    killed = Tracker("p", "e", ["tensorboard"], board, None, 10, 0, enabled=True, keep_through=-1)
    for step in range(6):
        killed.log({"x": 1.0}, step)
    killed.close()
    relaunched = Tracker(
        "p", "e", ["tensorboard"], board, None, 10, max(keep_through, 0), enabled=True, keep_through=keep_through
    )
    for step in range(keep_through + 1, 8):
        relaunched.log({"x": 2.0}, step)
    relaunched.close()
    kept = {step: 1.0 for step in range(keep_through + 1)}
    assert tensorboard_points(tmp_path / "tensorboard") == {**kept, **{s: 2.0 for s in range(keep_through + 1, 8)}}


def test_a_run_names_its_start_up_phases_with_their_seconds_and_every_step_line_the_time_left(
    tiny_model, tiny_data, tmp_path
):
    import subprocess
    import sys

    from tests.conftest import cpu_run_overrides

    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text(json.dumps({"step": 1, "x": 1.0}) + "\n")  # a run that left no checkpoint,
    (out / ".dagrl_lock").write_text(json.dumps({"pid": 1 << 22, "host": "h", "started": "t"}))  # killed: its lock
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dagrl.main_dag",
            *cpu_run_overrides(tiny_model, tiny_data, out, **{"trainer.test_freq": 1}),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    for phase in (
        "training prompts, 2 steps of 4; 8 validation prompts (",
        "models built in ",
        "rollout engine started in ",
        "ready in ",
    ):
        assert phase in log, phase
    assert "written by a run that left no checkpoint: they run again" in log and "after step -1" not in log
    assert "took over the lock of pid 4194304 on h (started t)" in log and (out / ".dagrl_lock").read_text() == ""
    steps = [line for line in log.splitlines() if " - 1/2 steps, eta " in line or " - 2/2 steps, eta 0s" in line]
    assert len(steps) == 2, log[-3000:]
