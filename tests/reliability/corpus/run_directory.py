from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from tests.reliability.corpus.case import MODEL_KEY, Case, Paths
from tests.reliability.corpus.data_makers import _data_dir

TOPIC = "The run directory: where it may be, and rows it holds from before"
RUN = "trainer.default_local_dir={ws}/run"


def rows_in_run(name: str, count: int) -> Callable[[Path, Paths], None]:
    """{ws}/run/<name> with `count` rows: an earlier run's that left no checkpoint, or another tool's."""

    def make(ws: Path, paths: Paths) -> None:
        (ws / "run").mkdir()
        (ws / "run" / name).write_text("".join(json.dumps({"step": step, "x": 1.0}) + "\n" for step in range(count)))

    return make


CASES: tuple[Case, ...] = (
    Case(
        "run_dir_is_the_root",
        "`trainer.default_local_dir=/` (what `$CKPT_ROOT/` becomes with the variable unset)",
        ("trainer.default_local_dir=/",),
        ("trainer.default_local_dir=/ is the file-system root", "set the variable"),
    ),
    Case(
        "run_dir_is_home",
        "`trainer.default_local_dir=$HOME`",
        ("trainer.default_local_dir=/tmp",),
        ("trainer.default_local_dir=/tmp is the home directory", "~/checkpoints/<experiment>"),
        env={"HOME": "/tmp"},
    ),
    Case(
        "run_dir_is_the_model",
        "`trainer.default_local_dir` = `actor_rollout_ref.model.path`",
        ("trainer.default_local_dir={model}",),
        (f"is the model directory {MODEL_KEY}=<model>", "a directory of the run's own"),
    ),
    Case(
        "run_dir_inside_the_model",
        "`trainer.default_local_dir=<model.path>/checkpoints`",
        ("trainer.default_local_dir={model}/checkpoints",),
        (f"is inside the model directory {MODEL_KEY}=<model>", "a directory of the run's own"),
    ),
    Case(
        "run_dir_is_the_data_dir",
        "`trainer.default_local_dir` = the directory of `data.train_files`",
        ("trainer.default_local_dir={ws}/data", "data.train_files={ws}/data/train.parquet"),
        ("is the directory of data.train_files", "a directory of the run's own"),
        make=_data_dir,
    ),
    Case(
        "earlier_metrics_rows",
        "`metrics.jsonl` in trainer.default_local_dir with no checkpoint (an earlier run with save_freq=-1)",
        (RUN,),
        ("holds metrics.jsonl (5 rows)", "no checkpoint this run resumes from", "move them away"),
        make=rows_in_run("metrics.jsonl", 5),
    ),
    Case(
        "foreign_prompt_ledger",
        "a `prompt_ledger.jsonl` that no checkpoint in trainer.default_local_dir accounts for",
        (RUN,),
        ("holds prompt_ledger.jsonl (3 rows)", "move them away"),
        make=rows_in_run("prompt_ledger.jsonl", 3),
    ),
    Case(
        "earlier_rows_with_resume_disabled",
        "`trainer.resume_mode=disable` beside an earlier run's `metrics.jsonl`",
        (RUN, "trainer.resume_mode=disable"),
        ("holds metrics.jsonl (2 rows)", "choose another trainer.default_local_dir"),
        make=rows_in_run("metrics.jsonl", 2),
    ),
    Case(
        "sweep_into_one_dir",
        "`-m actor.optim.lr=1e-6,1e-5` (a Hydra sweep) with one trainer.default_local_dir",
        ("-m", "actor_rollout_ref.actor.optim.lr=1e-6,1e-5"),
        ("-m sweeps actor_rollout_ref.actor.optim.lr", "trainer.default_local_dir=<tmp>/ckpt", "${hydra:job.num}"),
    ),
)
