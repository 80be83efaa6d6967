"""Optional metric sinks: wandb (offline) and mlflow (file store) record the logged values at their steps, the
run's names and config; neither is imported unless asked for; pre-flight names the pip extra when one is missing.

wandb and mlflow are not in the `test` extra (together ~100 MB of packages): these tests skip without them."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from dagrl.config.errors import ConfigError
from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.config.validate import preflight
from dagrl.trainer.tracking import Tracker, mlflow_name, mlflow_tracking_uri
from tests.conftest import cpu_run_overrides
from tests.helpers import metrics_by_step, run_in_session

ROOT = Path(__file__).parents[2]
STEPS = {
    1: {"critic/score/mean": 0.25, "val-core/dagrl/arithmetic/acc/mean@2": 0.5},
    2: {"critic/score/mean": 0.75, "val-core/dagrl/arithmetic/acc/mean@2": 1.0},
}
CONFIG = {"data": {"seed": 7, "train_files": ["a.parquet"]}, "trainer": {"project_name": "proj"}}


def needs(package: str):
    return pytest.importorskip(package, reason=f"{package} is optional (pip install 'dagrl[{package}]')")


def _wandb_records(run_file: Path) -> list:
    """The protobuf records of a .wandb file: a 7-byte header, then 32 KiB blocks of chunks, each with a 7-byte
    header (crc32, length, kind: 1 full, 2 first, 3 middle, 4 last). wandb ships the record schema, not a reader."""
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    assert data[:4] == b":W&B"
    records, pending, position, block = [], b"", 7, 32 * 1024
    while position + 7 <= len(data):
        if block - position % block < 7:  # too little room left for a chunk header: the block is padded
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if kind == 0 or position + 7 + length > len(data):  # the end, or a chunk still being written
            break
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_run(wandb_dir: Path) -> tuple[dict, dict[int, dict[str, float]]]:
    """(run record fields, {step: metrics}) of the one offline run under `wandb_dir`."""
    [run_file] = wandb_dir.glob("wandb/offline-run-*/run-*.wandb")
    deadline = time.monotonic() + 60
    while True:  # wandb's service process may still be writing after finish() returns: wait for the exit record
        records = _wandb_records(run_file)
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            break
        assert time.monotonic() < deadline, f"{run_file} has no exit record"
        time.sleep(0.2)
    run, history = {}, {}
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "run":
            config = {item.key: json.loads(item.value_json) for item in record.run.config.update}
            run = {"project": record.run.project, "name": record.run.display_name, "config": config}
        elif kind == "history":
            values = {
                item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item
            }
            history[int(values.pop("_step"))] = {k: v for k, v in values.items() if not k.startswith("_")}
    return run, history


@pytest.fixture()
def offline_wandb(tmp_path, monkeypatch) -> Iterator[Path]:
    wandb = needs("wandb")
    for name, value in {
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(tmp_path),
        "WANDB_SILENT": "true",
        "WANDB_CONFIG_DIR": str(tmp_path / "config"),
        "WANDB_CACHE_DIR": str(tmp_path / "cache"),
        "WANDB_DATA_DIR": str(tmp_path / "data"),
    }.items():
        monkeypatch.setenv(name, value)
    yield tmp_path
    wandb.teardown()  # wandb keeps the first run's settings (WANDB_DIR) for the process otherwise


def log_steps(backends: list[str], **kwargs) -> None:
    tracker = Tracker(
        "proj", "exp", backends, None, None, total_steps=2, start_step=0, enabled=True, config=lambda: CONFIG, **kwargs
    )
    for step, metrics in STEPS.items():
        tracker.log(metrics, step)
        tracker.advance()
    tracker.close()


def test_wandb_offline_run_holds_each_steps_values_names_and_config(offline_wandb):
    log_steps(["wandb"])
    run, history = wandb_run(offline_wandb)
    assert run["project"] == "proj" and run["name"] == "exp"
    assert run["config"]["data"] == CONFIG["data"]
    assert history == STEPS


def mlflow_run(uri: str):
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads a file store only when opted in
    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name("proj").experiment_id])
    history = {}
    for key in run.data.metrics:
        for point in client.get_metric_history(run.info.run_id, key):
            history.setdefault(point.step, {})[key] = point.value
    return run, history


@pytest.mark.parametrize("from_env", [True, False], ids=["MLFLOW_TRACKING_URI", "default_under_checkpoints"])
def test_mlflow_file_store_holds_each_steps_values_names_and_config(tmp_path, monkeypatch, from_env):
    needs("mlflow")
    root = tmp_path / "checkpoints"
    if from_env:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "elsewhere" / "mlruns").as_uri())
    else:
        monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    uri = mlflow_tracking_uri(str(root))
    assert uri == (tmp_path / "elsewhere" / "mlruns" if from_env else root / "mlruns").as_uri()
    log_steps(["mlflow"], mlflow_uri=uri)

    assert (Path(uri.removeprefix("file://")) / "0").is_dir()  # the store is where the URI says
    run, history = mlflow_run(uri)
    assert run.info.run_name == "exp" and run.info.status == "FINISHED"
    assert run.data.params["data.seed"] == "7" and run.data.params["data.train_files"] == "['a.parquet']"
    assert history == {step: {mlflow_name(k): v for k, v in metrics.items()} for step, metrics in STEPS.items()}
    assert "val-core/dagrl/arithmetic/acc/mean_at_2" in history[1]


def test_optional_sinks_are_off_on_other_ranks_and_not_imported_unless_asked(tmp_path):
    def unread_config() -> dict:
        raise AssertionError("the config is read only for a sink that records it")

    tracker = Tracker(
        "proj", "exp", ["console", "wandb", "mlflow"], None, None, 2, 0, enabled=False, config=unread_config
    )
    tracker.log(STEPS[1], 1)
    tracker.close()
    assert tracker.remote == []

    code = (
        "import sys; from dagrl.trainer.tracking import Tracker; "
        f"t = Tracker('p', 'e', ['console', 'jsonl'], None, {str(tmp_path / 'm.jsonl')!r}, 1, 0, True, "
        "config=lambda: 1 / 0); t.log({'a': 1.0}, 1); t.close(); "
        "loaded = {'wandb', 'mlflow'} & set(sys.modules); assert not loaded, loaded"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("package", ["wandb", "mlflow"])
def test_preflight_names_the_extra_of_a_missing_logger_package(tiny_model, tiny_data, tmp_path, monkeypatch, package):
    overrides = cpu_run_overrides(
        tiny_model, tiny_data, tmp_path / "ckpt", **{"trainer.logger": f"[console,{package}]"}
    )
    monkeypatch.setitem(sys.modules, package, None)  # find_spec answers None: as if not installed
    with pytest.raises(ConfigError) as caught:
        preflight(Cfg(compose(overrides)))
    assert caught.value.key == "trainer.logger"
    message = str(caught.value)
    assert f"pip install 'dagrl[{package}]'" in message and "\n" not in message
    preflight(Cfg(compose(overrides)), world_size=1)  # planning elsewhere: this machine's packages do not matter


@pytest.mark.slow
def test_a_run_logs_the_same_metrics_to_jsonl_wandb_and_mlflow(tiny_model, tiny_data, offline_wandb):
    needs("mlflow")
    out = offline_wandb / "run"
    overrides = cpu_run_overrides(
        tiny_model,
        tiny_data,
        out,
        **{
            "trainer.logger": "[console,jsonl,wandb,mlflow]",
            "trainer.total_training_steps": 1,
            "trainer.project_name": "proj",
            "trainer.experiment_name": "exp",
        },
    )
    env = {k: v for k, v in os.environ.items() if k.startswith("WANDB_")}
    code, stderr = run_in_session([sys.executable, "-m", "dagrl.main_dag", *overrides], env)
    assert code == 0, stderr[-3000:]
    expected = {
        step: {k: v for k, v in metrics.items() if k != "step"} for step, metrics in metrics_by_step(out).items()
    }
    assert sorted(expected) == [0, 1] and "critic/score/mean" in expected[1]

    run, history = wandb_run(offline_wandb)
    assert run["name"] == "exp" and run["config"]["data"]["train_batch_size"] == 4
    assert {step: {k: v for k, v in m.items() if k in expected[step]} for step, m in history.items()} == expected

    run, history = mlflow_run((out / "mlruns").resolve().as_uri())
    assert run.data.params["data.train_batch_size"] == "4"
    expected = {step: {mlflow_name(k): v for k, v in m.items()} for step, m in expected.items()}
    assert {step: {k: v for k, v in m.items() if k in expected[step]} for step, m in history.items()} == expected


def test_the_run_summary_says_how_it_went_and_jsonl_rows_carry_the_wall_clock(tmp_path):
    path = tmp_path / "metrics.jsonl"
    tracker = Tracker("p", "e", ["jsonl"], None, str(path), 3, 0, True)
    tracker.log({"val-core/src/acc/mean@1": 0.2}, 0)
    for step, acc in ((1, None), (2, 0.6), (3, 0.5)):
        tracker.log(
            {"training/global_step": float(step), **({} if acc is None else {"val-core/src/acc/mean@1": acc})}, step
        )
    summary = tracker.summary(3, "/ckpt (newest: global_step_3)", str(path), None)
    tracker.close()
    lines = summary.splitlines()
    assert lines[0].startswith("run summary: steps 1..3 of 3 in ")
    assert lines[1] == "  val-core/src/acc/mean@1: first 0.2 (step 0), last 0.5 (step 3), best 0.6 (step 2)"
    assert lines[2:] == ["  checkpoints: /ckpt (newest: global_step_3)", f"  metrics: {path}"]  # no tensorboard
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3] and all(abs(r["time"] - time.time()) < 60 for r in rows)


@pytest.mark.parametrize("keep_through,left", [(3, [0, 1, 2, 3]), (-1, []), (None, [0, 1, 2, 3, 4, 5])])
def test_a_run_that_starts_again_drops_the_rows_it_will_write_again(tmp_path, keep_through, left):
    """A relaunch without a checkpoint (-1) or from the step-3 checkpoint runs the later steps again: their old rows
    go first, so every step is in metrics.jsonl once; validate_only (None) appends."""
    from dagrl.trainer.tracking import Tracker

    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": step, "x": 1.0}) + "\n" for step in range(6)))
    tracker = Tracker("p", "e", ["jsonl"], None, str(path), 10, 0, enabled=True, keep_through=keep_through)
    tracker.close()
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == left
    assert not path.with_suffix(".jsonl.tmp").exists()


def test_a_resumed_runs_summary_counts_the_validations_before_it(tmp_path):
    from dagrl.trainer.tracking import Tracker

    path = tmp_path / "metrics.jsonl"
    key = "val-core/d/acc/mean@1"
    path.write_text("".join(json.dumps({"step": s, key: v}) + "\n" for s, v in ((0, 0.1), (2, 0.5), (4, 0.3))))
    tracker = Tracker("p", "e", ["jsonl"], None, str(path), 6, 2, enabled=True, keep_through=2)
    tracker.log({"training/global_step": 3}, 3)
    tracker.log({key: 0.4}, 4)
    text = tracker.summary(6, "ckpts", str(path), None)
    tracker.close()
    assert f"{key}: first 0.1 (step 0), last 0.4 (step 4), best 0.5 (step 2)" in text
