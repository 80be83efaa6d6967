"""Metric sinks: console, tensorboard, jsonl (rank 0 only), and a progress bar with ETA."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# Shown on the console line; everything goes to tensorboard and jsonl.
_CONSOLE_PREFIXES = ("critic/score/mean", "val-core/", "actor/pg_loss", "actor/entropy", "actor/grad_norm",
                     "response_length/mean", "timing_s/step", "perf/throughput")


class Tracker:
    def __init__(self, run_name: str, backends: list[str], tensorboard_dir: str | None, jsonl_path: str | None,
                 total_steps: int, start_step: int, enabled: bool) -> None:
        self.enabled = enabled
        self.backends = backends
        self.writer = None
        self.jsonl = None
        self.progress = None
        if not enabled:
            return
        if "tensorboard" in backends:
            from torch.utils.tensorboard import SummaryWriter
            Path(tensorboard_dir).mkdir(parents=True, exist_ok=True)
            self.writer = SummaryWriter(log_dir=tensorboard_dir)
            logger.info("tensorboard events in %s", tensorboard_dir)
        if "jsonl" in backends:
            Path(jsonl_path).parent.mkdir(parents=True, exist_ok=True)
            self.jsonl = open(jsonl_path, "a", encoding="utf-8")
        from tqdm import tqdm
        self.progress = tqdm(total=total_steps, initial=start_step, desc=run_name, unit="step", dynamic_ncols=True)

    def log(self, metrics: dict[str, float], step: int) -> None:
        if not self.enabled:
            return
        if "console" in self.backends:
            shown = {k: v for k, v in sorted(metrics.items()) if k.startswith(_CONSOLE_PREFIXES)}
            text = " - ".join(f"{k}:{v:.4g}" for k, v in shown.items())
            (self.progress.write if self.progress else print)(f"step:{step} - {text}")
        if self.writer is not None:
            for key, value in metrics.items():
                self.writer.add_scalar(key, value, step)
            self.writer.flush()
        if self.jsonl is not None:
            self.jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
            self.jsonl.flush()

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


def tensorboard_dir(configured: str | None, checkpoint_root: str) -> str:
    """trainer.tensorboard_dir, else $TENSORBOARD_DIR (siiRL's scripts set it), else <checkpoint root>/tensorboard."""
    chosen = configured or os.environ.get("TENSORBOARD_DIR") or os.path.join(checkpoint_root, "tensorboard")
    return os.path.expanduser(chosen)


def dump_generations(directory: str, step: int, rows: list[dict[str, Any]]) -> None:
    path = Path(os.path.expanduser(directory))
    path.mkdir(parents=True, exist_ok=True)
    with open(path / f"{step}.jsonl", "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, default=str) + "\n")
