"""Metric sinks: console (each step's line ends with the time left), tensorboard, jsonl, wandb, mlflow (rank 0 only),
and a progress bar on a terminal.

wandb and mlflow are optional packages (`pip install 'dagrl[wandb]'` / `'dagrl[mlflow]'`), imported only when
`trainer.logger` names them; pre-flight refuses a run that asks for one that is not installed. As in verl, the
run is named by trainer.project_name (wandb project, mlflow experiment) and trainer.experiment_name (run name),
the whole config is recorded with it, and every metric is logged at its global step.
"""

from __future__ import annotations

import json
import sys
import time
import logging
import os
import re
from functools import partial
from pathlib import Path
from typing import Any, Callable

from dagrl.config.preflight.trainer import OPTIONAL_LOGGERS
from dagrl.trainer.timing import duration

logger = logging.getLogger(__name__)
_now = time.monotonic  # the clock of the time left (a name of its own, for tests)

# Shown on the console line; everything goes to the other sinks.
_CONSOLE_PREFIXES = (
    "critic/score/mean",
    "val-core/",
    "actor/pg_loss",
    "actor/entropy",
    "actor/grad_norm",
    "response_length/mean",
    "timing_s/step",
    "perf/throughput",
)


class _WandbSink:
    def __init__(self, project: str, experiment: str, config: dict[str, Any]) -> None:
        import wandb  # reads WANDB_API_KEY / WANDB_MODE / WANDB_DIR / WANDB_ENTITY itself

        self.run = wandb.init(project=project, name=experiment, config=config)

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self) -> None:
        self.run.finish()


# mlflow names allow only these characters; verl writes "@" (as in mean@N) as "_at_".
_MLFLOW_BAD_CHARS = re.compile(r"[^A-Za-z0-9_\-. :/]")


def mlflow_name(key: str) -> str:
    return _MLFLOW_BAD_CHARS.sub("_", key.replace("@", "_at_"))


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}: the dotted names the command line uses."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat


class _MlflowSink:
    def __init__(self, project: str, experiment: str, config: dict[str, Any], tracking_uri: str) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

        if tracking_uri.startswith("file:"):
            # MLflow 3 refuses its file store unless opted in; a file: URI (ours or the user's) is that opt-in
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(tracking_uri)
        found = self.client.get_experiment_by_name(project)
        experiment_id = found.experiment_id if found else self.client.create_experiment(project)
        self.run_id = self.client.create_run(experiment_id, run_name=experiment).info.run_id
        params = [Param(mlflow_name(key), str(value)[:MAX_PARAM_VAL_LENGTH]) for key, value in flatten(config).items()]
        self.client.log_batch(self.run_id, params=params)
        logger.info("mlflow run %s (experiment %r) at %s", self.run_id, project, tracking_uri)

    def log(self, metrics: dict[str, float], step: int) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(
            self.run_id, metrics=[Metric(mlflow_name(key), float(value), now, step) for key, value in metrics.items()]
        )

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _trim_rows(path: Path, keep_through: int) -> list[dict]:
    """Drop `path`'s rows of steps after `keep_through`, atomically (a kill leaves the old file or the new); the
    rows kept, parsed (read once). -1 (no checkpoint) reaches here only for a killed run's rows: pre-flight refuses
    rows that no checkpoint or lock record accounts for (config/preflight/trainer.py::check_earlier_rows)."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    rows = [json.loads(line) for line in lines]
    kept = [(line, row) for line, row in zip(lines, rows) if row.get("step", -1) <= keep_through]
    if len(kept) < len(lines):
        dropped = sorted({row.get("step", -1) for row in rows if row.get("step", -1) > keep_through})
        steps = f"step {dropped[0]}" if len(dropped) == 1 else f"steps {dropped[0]}..{dropped[-1]}"
        logger.info(
            "%s: dropped %d row(s) of %s, %s: they run again",
            path,
            len(lines) - len(kept),
            steps,
            f"written after the checkpoint of step {keep_through}"
            if keep_through >= 0
            else "written by a run that left no checkpoint",
        )
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(line for line, _ in kept), encoding="utf-8")
        os.replace(tmp, path)
    return [row for _, row in kept]


class Tracker:
    def __init__(
        self,
        project_name: str,
        experiment_name: str,
        backends: list[str],
        tensorboard_dir: str | None,
        jsonl_path: str | None,
        total_steps: int,
        start_step: int,
        enabled: bool,
        config: Callable[[], dict[str, Any]] | None = None,
        mlflow_uri: str | None = None,
        keep_through: int | None = None,
        validates: Callable[[int], bool] | None = None,
    ) -> None:
        """`config` is called only when a sink records the run's config (wandb, mlflow). `keep_through`: the
        jsonl file loses its rows of later steps first and TensorBoard hides its events of those steps (they run
        again: a resume from that step, or -1 for a run that starts over without a checkpoint), so every step
        appears once. `validates(step)`: whether that step validates, for the time left on the step lines."""
        self.enabled = enabled
        self.backends = backends
        self.total_steps, self.validates = total_steps, validates
        self.started, self.steps = time.time(), []  # for the end-of-run summary
        self.clock = _now()  # when the last logged event ended: the next one's wall time runs from there
        self.seconds: dict[str, list[float]] = {"step": [], "validation": []}  # wall times, for the time left
        self.validation: dict[str, list[tuple[int, float]]] = {}  # val-core/* key -> (step, value) as logged
        self.writer = None
        self.jsonl = None
        self.progress = None
        self.remote: list[_WandbSink | _MlflowSink] = []
        if not enabled:
            return
        if "tensorboard" in backends:
            from torch.utils.tensorboard import SummaryWriter

            Path(tensorboard_dir).mkdir(parents=True, exist_ok=True)
            # purge_step: TensorBoard drops the events of the steps that run again (a killed run's, in earlier files)
            self.writer = SummaryWriter(
                log_dir=tensorboard_dir, purge_step=keep_through + 1 if keep_through is not None else None
            )
            logger.info("tensorboard events in %s", tensorboard_dir)
        if "jsonl" in backends:
            Path(jsonl_path).parent.mkdir(parents=True, exist_ok=True)
            if keep_through is not None:
                for row in _trim_rows(Path(jsonl_path), keep_through):  # the summary covers earlier steps too
                    for key, value in row.items():
                        if key.startswith("val-core/"):
                            self.validation.setdefault(key, []).append((row["step"], value))
            self.jsonl = open(jsonl_path, "a", encoding="utf-8")
        run_config = config() if config is not None and set(OPTIONAL_LOGGERS) & set(backends) else {}
        if "wandb" in backends:
            self.remote.append(_WandbSink(project_name, experiment_name, run_config))
        if "mlflow" in backends:
            uri = mlflow_uri or mlflow_tracking_uri(".")
            self.remote.append(_MlflowSink(project_name, experiment_name, run_config, uri))
        if sys.stderr.isatty():  # a bar on a terminal only: in a log file its carriage returns make 1,000-char lines
            from tqdm import tqdm

            self.progress = tqdm(
                total=total_steps,
                initial=start_step,
                desc=f"{project_name}/{experiment_name}",
                unit="step",
                dynamic_ncols=True,
            )

    def log(self, metrics: dict[str, float], step: int) -> None:
        if not self.enabled:
            return
        now = _now()
        wall, self.clock = now - self.clock, now
        validation = metrics.get("timing_s/testing", 0.0)
        if "training/global_step" in metrics:
            self.steps.append(step)
            self.seconds["step"].append(wall - validation)
            if validation:
                self.seconds["validation"].append(validation)
        elif any(key.startswith("val-") for key in metrics):  # a validation before the steps: all of its wall time
            self.seconds["validation"].append(wall)
        for key, value in metrics.items():
            if key.startswith("val-core/"):
                self.validation.setdefault(key, []).append((step, value))
        if "console" in self.backends:
            shown = {k: v for k, v in sorted(metrics.items()) if k.startswith(_CONSOLE_PREFIXES)}
            parts = [f"{k}:{v:.4g}" for k, v in shown.items()]
            if "training/global_step" in metrics:
                parts.append(f"{step}/{self.total_steps} steps, eta {duration(self.seconds_left(step))}")
            text = " - ".join(parts)
            (self.progress.write if self.progress else partial(print, flush=True))(f"step:{step} - {text}")
        if self.writer is not None:
            for key, value in metrics.items():
                self.writer.add_scalar(key, value, step)
            self.writer.flush()
        if self.jsonl is not None:
            self.jsonl.write(json.dumps({"step": step, "time": round(time.time(), 3), **metrics}) + "\n")
            self.jsonl.flush()
        for sink in self.remote:
            sink.log(metrics, step)

    def seconds_left(self, step: int) -> float:
        """After `step`: the steps left x the mean step's wall time so far (its validation apart, checkpoints in),
        plus the validations left x the mean validation's (every step's wall time when `validates` is unknown)."""
        steps, validations = self.seconds["step"], self.seconds["validation"]
        if not steps:
            return 0.0
        later = range(step + 1, self.total_steps + 1)
        if self.validates is None:
            return len(later) * (sum(steps) + sum(validations)) / len(steps)
        mean_validation = sum(validations) / len(validations) if validations else 0.0
        return len(later) * sum(steps) / len(steps) + sum(map(self.validates, later)) * mean_validation

    def summary(self, total_steps: int, checkpoints: str, jsonl_path: str | None, tensorboard_dir: str | None) -> str:
        """How the run went, in a few lines: steps and wall time (and the time left of a run stopped early), each
        validation score's first/last/best, where its checkpoints and metrics are."""
        seconds = time.time() - self.started
        if self.steps:
            notes = [f"{seconds / len(self.steps):.1f} s a step"]
            if self.seconds["validation"]:
                notes.append(f"{sum(self.seconds['validation']):.0f} s of validation")
            if self.steps[-1] < total_steps:
                notes.append(f"about {duration(self.seconds_left(self.steps[-1]))} more to step {total_steps}")
            lines = [
                f"run summary: steps {self.steps[0]}..{self.steps[-1]} of {total_steps} in {seconds:.0f} s "
                f"({'; '.join(notes)})"
            ]
        else:
            lines = [f"run summary: no step trained ({seconds:.0f} s)"]
        for key, points in sorted(self.validation.items()):
            best = max(points, key=lambda point: point[1])
            lines.append(
                f"  {key}: first {points[0][1]:.4g} (step {points[0][0]}), last {points[-1][1]:.4g} "
                f"(step {points[-1][0]}), best {best[1]:.4g} (step {best[0]})"
            )
        lines.append(f"  checkpoints: {checkpoints}")
        if self.jsonl is not None:
            lines.append(f"  metrics: {jsonl_path}")
        if self.writer is not None:
            lines.append(f"  curves: tensorboard --logdir {tensorboard_dir}")
        return "\n".join(lines)

    def advance(self) -> None:
        if self.progress is not None:
            self.progress.update(1)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()
        if self.writer is not None:
            self.writer.close()
        if self.jsonl is not None:
            self.jsonl.close()
        for sink in self.remote:
            sink.close()


def tensorboard_dir(configured: str | None, checkpoint_root: str) -> str:
    """trainer.tensorboard_dir, else $TENSORBOARD_DIR (siiRL's scripts set it), else <checkpoint root>/tensorboard."""
    chosen = configured or os.environ.get("TENSORBOARD_DIR") or os.path.join(checkpoint_root, "tensorboard")
    return os.path.expanduser(chosen)


def mlflow_tracking_uri(checkpoint_root: str) -> str:
    """$MLFLOW_TRACKING_URI (a server, a database, a file store), else a file store at <checkpoint root>/mlruns:
    beside the tensorboard events, and usable with mlflow-skinny (no database driver) and offline."""
    configured = os.environ.get("MLFLOW_TRACKING_URI")
    if configured:
        return configured
    return Path(os.path.expanduser(checkpoint_root), "mlruns").resolve().as_uri()


def dump_generations(directory: str, step: int, rows: list[dict[str, Any]]) -> None:
    path = Path(os.path.expanduser(directory))
    path.mkdir(parents=True, exist_ok=True)
    with open(path / f"{step}.jsonl", "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, default=str) + "\n")


def generation_records(batch, scores, tokenizer) -> list[dict[str, Any]]:
    """One record per response of `batch`: its prompt and response text (special tokens dropped, as verl's dumps),
    score (summed over tokens), data_source and dataset index."""
    prompts = tokenizer.batch_decode(batch["prompts"], skip_special_tokens=True)
    responses = tokenizer.batch_decode(batch["responses"], skip_special_tokens=True)
    totals = scores.sum(-1).tolist()
    return [
        {
            "data_source": batch["data_source"][row],
            "index": int(batch["index"][row]),
            "score": float(totals[row]),
            "prompt": prompts[row],
            "response": responses[row],
        }
        for row in range(len(batch))
    ]


def log_generations(records: list[dict[str, Any]], count: int, step: int) -> None:
    """trainer.log_val_generations: the first `count` records (by data_source and index, so every validation shows
    the same prompts), one console line each."""
    for record in sorted(records, key=lambda r: (str(r["data_source"]), r["index"]))[:count]:
        logger.info(
            "val generation (step %d) [%s #%d] score=%g\n  prompt: %s\n  response: %s",
            step,
            record["data_source"],
            record["index"],
            record["score"],
            record["prompt"].strip(),
            record["response"].strip(),
        )
