from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.reliability.corpus.case import MODEL_KEY, Case, Paths
from tests.reliability.corpus.file_makers import text_file


def copied_val(ws: Path, paths: Paths) -> None:
    """{ws}/val.parquet: the training file copied under another name (`cp train.parquet val.parquet`)."""
    shutil.copy(paths.train, ws / "val.parquet")


TOPIC = "Held-out data that is not held out"
CASES: tuple[Case, ...] = (
    Case(
        "val_files_copy_of_train",
        "`data.val_files` names a copy of the training file under another name: validation would score trained "
        "prompts and read as generalisation",
        ("data.val_files={ws}/val.parquet",),
        ("data.val_files has <tmp>/val.parquet, a byte-for-byte copy of <data>/train.parquet", "held-out rows"),
        make=copied_val,
    ),
)


def run_dir(ws: Path, paths: Paths) -> None:
    """{ws}/run: what a dagrl run leaves, its step 1 and step 2 (the run's config.json beside the actor's shards)."""
    for step in (1, 2):
        actor = ws / "run" / f"global_step_{step}" / "actor"
        actor.mkdir(parents=True)
        (actor / "metadata.json").write_text("{}")
        (actor / "__0_0.distcp").write_bytes(b"\0" * 64)
        (actor.parent / "config.json").write_text(json.dumps({"trainer": {"total_training_steps": 2}}))
        (actor.parent / "dagrl_checkpoint.json").write_text(json.dumps({"global_step": step}))
    (ws / "run" / "latest_checkpointed_iteration.txt").write_text("2")


MERGE = "python3 scripts/model_merger.py merge --backend megatron --local_dir <tmp>/run/global_step_2/actor"
CHECKPOINT_AS_MODEL = tuple(
    Case(
        f"model_path_is_a_dagrl_{name}",
        f"`{MODEL_KEY}` names {what} of an earlier run, to go on from the trained weights",
        (f"{MODEL_KEY}={{ws}}/run{below}",),
        (MODEL_KEY, "holds a Megatron checkpoint, not an HF model", MERGE, f"then point {MODEL_KEY} at <out>"),
        make=run_dir,
    )
    for name, what, below in (
        ("run_dir", "the run directory", ""),
        ("checkpoint", "a checkpoint (global_step_N)", "/global_step_2"),
        ("actor_checkpoint", "a checkpoint's actor folder", "/global_step_2/actor"),
    )
)
CASES += CHECKPOINT_AS_MODEL

REWARD_METRICS_ONLY = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    correct = solution_str.strip() == ground_truth\n"
    "    return {'acc': float(correct), 'pred': solution_str.strip()}\n"
)
REWARD_METRICS_CALL = (
    "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
    "    return dict(acc=float(solution_str.strip() == ground_truth))\n"
)
CASES += (
    Case(
        "reward_returns_dict_literal_without_score",
        "a custom scorer returns a dict of metrics (`{'acc': ..., 'pred': ...}`) without the 'score' key",
        ("custom_reward_function.path={ws}/reward.py",),
        ("compute_score in '<tmp>/reward.py' returns a dict without a 'score' key at line 3", "add 'score'"),
        make=text_file("reward.py", REWARD_METRICS_ONLY),
    ),
    Case(
        "reward_returns_dict_call_without_score",
        "a custom scorer returns `dict(acc=...)` without the 'score' key",
        ("custom_reward_function.path={ws}/reward.py",),
        ("returns a dict without a 'score' key at line 2 (keys 'acc'", "return {'score': ..., 'acc': ...}"),
        make=text_file("reward.py", REWARD_METRICS_CALL),
    ),
)

R = "actor_rollout_ref.rollout"
CASES += tuple(
    Case(
        f"vllm_setting_on_hf_{name}",
        f"`{R}.{name}={value}` from a GPU script, run with the `hf` rollout (transformers' generate)",
        (f"{R}.{name}={value}",),
        (f"{R}.{name}={shown} has no effect: {R}.name=hf", f"set {R}.name=vllm, or drop {R}.{name}"),
    )
    for name, value, shown in (("gpu_memory_utilization", "0.7", "0.7"), ("enforce_eager", "false", "false"))
)
