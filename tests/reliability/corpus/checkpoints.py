from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

from tests.reliability.corpus.case import MEGATRON, Case
from tests.reliability.corpus.data_makers import _data_dir
from tests.reliability.corpus.file_makers import (
    _actor_without_metadata,
    _marker_cut,
    _marker_other_step,
    _marker_without_actor,
    _tracker_directory,
    _tracker_only,
    _tracker_text,
    in_checkpoints,
    step_dir,
    symlink_loop,
    text_file,
)
from tests.reliability.corpus.model_makers import model_copy


def _damaged_newest(harm: Callable[[Path], None]) -> Callable[[Path], None]:
    """A global_step_4 saved after global_step_2, its marker recording its files' sizes as dagrl's save does, then
    harmed as a full disk or a bad copy leaves it."""

    def change(root: Path) -> None:
        newest = root / "global_step_4"
        shutil.copytree(root / "global_step_2", newest)
        files = {"actor/__0_0.distcp": 4096, "data.pt": 256}
        (newest / "dagrl_checkpoint.json").write_text(json.dumps({"global_step": 4, "files": files}))
        harm(newest)

    return change


def _only_one_damaged(root: Path) -> None:
    (root / "global_step_2" / "dagrl_checkpoint.json").write_text(
        json.dumps({"global_step": 2, "files": {"actor/__0_0.distcp": 4096}})
    )
    _truncate("actor/__0_0.distcp", 0)(root / "global_step_2")


def _truncate(name: str, size: int) -> Callable[[Path], None]:
    def harm(path: Path) -> None:
        with open(path / name, "r+b") as file:
            file.truncate(size)

    return harm


TOPIC = "Checkpoints: trainer.default_local_dir and resuming"
CASES: tuple[Case, ...] = (
    Case(
        "dist_checkpoint_missing",
        "`megatron.use_dist_checkpointing=true` with a path that does not exist",
        (f"{MEGATRON}.use_dist_checkpointing=true", f"{MEGATRON}.dist_checkpointing_path={{ws}}/no_ckpt"),
        (f"{MEGATRON}.dist_checkpointing_path", "no_ckpt"),
    ),
    Case(
        "save_contents_unknown",
        "`actor.checkpoint.save_contents=[model,weights]` (an unknown part)",
        ("actor_rollout_ref.actor.checkpoint.save_contents=[model,weights]",),
        ("actor_rollout_ref.actor.checkpoint.save_contents", "weights"),
    ),
    Case(
        "save_contents_without_model",
        "`checkpoint.save_contents=[optimizer,extra]`",
        ("actor_rollout_ref.actor.checkpoint.save_contents=[optimizer,extra]",),
        ("must include model",),
    ),
    Case(
        "load_contents_not_saved",
        "`checkpoint.load_contents=[model,optimizer]` with save_contents=[model] (the "
        "run's own checkpoints could not be resumed)",
        (
            "actor_rollout_ref.actor.checkpoint.save_contents=[model]",
            "actor_rollout_ref.actor.checkpoint.load_contents=[model,optimizer]",
        ),
        (
            "load_contents restores ['optimizer']",
            "add ['optimizer'] to actor_rollout_ref.actor.checkpoint.save_contents",
        ),
    ),
    Case(
        "checkpoint_dir_not_writable",
        "trainer.default_local_dir on a read-only file system (/proc/sys)",
        ("trainer.default_local_dir=/proc/sys/dagrl_checkpoints",),
        ("trainer.default_local_dir", "/proc/sys/dagrl_checkpoints", "not writable"),
    ),
    Case(
        "checkpoint_dir_under_a_file",
        "trainer.default_local_dir inside a regular file",
        ("trainer.default_local_dir={ws}/a_file/checkpoints",),
        ("trainer.default_local_dir", "<tmp>/a_file", "not a directory"),
        make=text_file("a_file", ""),
    ),
    Case(
        "resume_path_partial",
        "resume_from_path is a partial checkpoint (killed save)",
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path={ckpt}/.tmp_global_step_3"),
        ("trainer.resume_from_path", ".tmp_global_step_3", "not a complete dagrl checkpoint"),
    ),
    Case(
        "resume_path_missing",
        "resume_from_path names no directory",
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path={ckpt}/global_step_9"),
        ("trainer.resume_from_path", "global_step_9", "no such directory"),
    ),
    Case(
        "resume_path_unset",
        "resume_mode=resume_path without resume_from_path",
        ("trainer.resume_mode=resume_path",),
        ("trainer.resume_from_path", "global_step_N"),
    ),
    Case(
        "resume_path_without_mode",
        "resume_from_path set while resume_mode=auto",
        ("trainer.resume_from_path={ckpt}/global_step_2",),
        ("trainer.resume_from_path", "resume_mode=resume_path"),
    ),
    Case(
        "resume_disabled_over_checkpoints",
        "resume_mode=disable on a directory that holds checkpoints",
        ("trainer.resume_mode=disable",),
        ("trainer.resume_mode=disable", "global_step_2", "resume_mode=auto"),
    ),
    Case(
        "foreign_step_dir",
        "a `global_step_1/` that dagrl did not write (another trainer's, a user's) in trainer.default_local_dir",
        ("trainer.default_local_dir={ws}/other",),
        ("trainer.default_local_dir", "global_step_1", "not written by dagrl", "move it away"),
        make=step_dir("global_step_1", complete=False),
    ),
    Case(
        "foreign_tmp_dir",
        "a `.tmp_global_step_1/` without dagrl's partial-save marker",
        ("trainer.default_local_dir={ws}/other", "trainer.resume_mode=disable"),
        ("trainer.default_local_dir", ".tmp_global_step_1", "not written by dagrl"),
        make=step_dir(".tmp_global_step_1", complete=False),
    ),
    Case(
        "resume_older_over_newer",
        "resume_from_path=global_step_1 of a branch while default_local_dir holds global_step_2",
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path={ws}/other/global_step_1"),
        ("trainer.resume_from_path", "global_step_1", "global_step_2", "new directory"),
        make=step_dir("global_step_1", complete=True),
    ),
    Case(
        "empty_checkpoint_dir",
        "`trainer.default_local_dir=` (empty: would write into the current directory)",
        ("trainer.default_local_dir=",),
        ("trainer.default_local_dir", "current directory"),
    ),
    Case(
        "checkpoint_dir_is_a_file",
        "trainer.default_local_dir names an existing file",
        ("trainer.default_local_dir={ws}/a_file",),
        ("<tmp>/a_file is not a directory", "trainer.default_local_dir"),
        make=text_file("a_file", "x"),
    ),
    Case(
        "checkpoint_dir_is_the_model",
        "`trainer.default_local_dir` = the HF model directory (swapped paths)",
        ("trainer.default_local_dir={ws}/model",),
        ("holds config.json", "a model directory", "actor_rollout_ref.model.path"),
        make=model_copy(),
    ),
    Case(
        "checkpoint_dir_is_the_data_dir",
        "`trainer.default_local_dir` = the directory of train.parquet",
        ("trainer.default_local_dir={ws}/data",),
        ("holds train.parquet", "a data directory"),
        make=_data_dir,
    ),
    Case(
        "checkpoint_dir_symlink_loop",
        "trainer.default_local_dir is a symlink to itself",
        ("trainer.default_local_dir={ws}/loop",),
        ("<tmp>/loop is a symlink that leads nowhere (a loop)", "trainer.default_local_dir"),
        make=symlink_loop("loop"),
    ),
    Case(
        "resume_path_is_the_root",
        "resume_from_path names trainer.default_local_dir, not a global_step_N in it",
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path={ckpt}"),
        ("trainer.resume_from_path", "global_step_N"),
    ),
    Case(
        "resume_path_actor_subdir",
        "resume_from_path names global_step_2/actor, not global_step_2",
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path={ckpt}/global_step_2/actor"),
        ("trainer.resume_from_path", "global_step_2/actor", "point it at a global_step_N"),
    ),
    Case(
        "resume_path_relative",
        "`resume_from_path=global_step_2` (relative to the current directory)",
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path=global_step_2"),
        ("trainer.resume_from_path=global_step_2: no such directory", "a relative path", "<tmp>/ckpt/global_step_N"),
    ),
    Case(
        "resume_path_none_string",
        "`resume_from_path=None` (Python's spelling: a string)",
        ("trainer.resume_mode=resume_path", "trainer.resume_from_path=None"),
        ("trainer.resume_from_path=None", "null is written trainer.resume_from_path=null"),
    ),
    Case(
        "resume_disabled_with_path",
        "`resume_mode=disable` with a resume_from_path",
        ("trainer.resume_mode=disable", "trainer.resume_from_path={ckpt}/global_step_2"),
        ("trainer.resume_from_path is set but trainer.resume_mode=disable",),
    ),
    Case(
        "checkpoint_marker_cut",
        "a complete checkpoint's dagrl_checkpoint.json cut short",
        (),
        ("<tmp>/ckpt/global_step_2 in trainer.default_local_dir is damaged", "not the JSON"),
        make=in_checkpoints(_marker_cut),
    ),
    Case(
        "checkpoint_marker_other_step",
        "global_step_6 whose marker records step 3 (a copied directory)",
        (),
        ("<tmp>/ckpt/global_step_6", "records global_step 3"),
        make=in_checkpoints(_marker_other_step),
    ),
    Case(
        "checkpoint_without_actor",
        "a global_step_4 with dagrl's marker and no actor/",
        (),
        ("<tmp>/ckpt/global_step_4", "no actor/ directory", "trainer.resume_from_path=<tmp>/ckpt/global_step_2"),
        make=in_checkpoints(_marker_without_actor),
    ),
    Case(
        "checkpoint_actor_without_metadata",
        "the newest checkpoint's actor/ has no metadata.json (megatron was imported to find it)",
        (),
        ("<tmp>/ckpt/global_step_4/actor is not a Megatron dist checkpoint", "move it out of <tmp>/ckpt"),
        make=in_checkpoints(_actor_without_metadata),
    ),
    Case(
        "checkpoint_without_data_pt",
        "a complete checkpoint whose data.pt was deleted",
        (),
        ("<tmp>/ckpt/global_step_2 in trainer.default_local_dir is damaged: it has no data.pt",),
        make=in_checkpoints(lambda root: (root / "global_step_2" / "data.pt").unlink()),
    ),
    Case(
        "checkpoint_shard_truncated",
        "the newest checkpoint's Megatron shard cut short (a full disk, a copy interrupted)",
        (),
        (
            "<tmp>/ckpt/global_step_4 in trainer.default_local_dir is damaged",
            "actor/__0_0.distcp is 1000 bytes, 4096 when saved (truncated)",
            "previous complete checkpoint is global_step_2",
            "trainer.resume_mode=resume_path trainer.resume_from_path=<tmp>/ckpt/global_step_2",
            "kept, renamed global_step_4.damaged",
        ),
        make=in_checkpoints(_damaged_newest(_truncate("actor/__0_0.distcp", 1000))),
    ),
    Case(
        "checkpoint_shard_missing",
        "the newest checkpoint's Megatron shard deleted",
        (),
        (
            "<tmp>/ckpt/global_step_4",
            "actor/__0_0.distcp is missing",
            "trainer.resume_from_path=<tmp>/ckpt/global_step_2",
        ),
        make=in_checkpoints(_damaged_newest(lambda path: (path / "actor" / "__0_0.distcp").unlink())),
    ),
    Case(
        "checkpoint_data_pt_truncated",
        "the newest checkpoint's data.pt cut short",
        (),
        ("<tmp>/ckpt/global_step_4", "data.pt is 10 bytes, 256 when saved", "trainer.resume_from_path="),
        make=in_checkpoints(_damaged_newest(_truncate("data.pt", 10))),
    ),
    Case(
        "checkpoint_only_one_damaged",
        "the only checkpoint's shard cut short (no earlier one to resume from)",
        (),
        ("<tmp>/ckpt/global_step_2", "is 0 bytes", "no earlier complete checkpoint", "move it out of <tmp>/ckpt"),
        make=in_checkpoints(_only_one_damaged),
    ),
    Case(
        "checkpoint_name_is_a_file",
        "a regular file named global_step_5 in trainer.default_local_dir",
        (),
        ("holds global_step_5, not written by dagrl",),
        make=in_checkpoints(lambda root: (root / "global_step_5").write_text("x")),
    ),
    Case(
        "tracker_names_a_missing_step",
        "latest_checkpointed_iteration.txt says 7, no global_step_7",
        ("trainer.default_local_dir={ws}/run",),
        ("names step 7", "remove the tracker file"),
        make=_tracker_only,
    ),
    Case(
        "tracker_holds_text",
        "latest_checkpointed_iteration.txt holds `global_step_2`",
        ("trainer.default_local_dir={ws}/run",),
        ("holds 'global_step_2', not a step number", "write the step number", "remove the file"),
        make=_tracker_text,
    ),
    Case(
        "tracker_is_a_directory",
        "latest_checkpointed_iteration.txt is a directory (the first save would fail after its step trained)",
        (),
        ("latest_checkpointed_iteration.txt in trainer.default_local_dir is not a file",),
        make=in_checkpoints(_tracker_directory),
    ),
    Case(
        "checkpoint_dir_empty",
        "`trainer.default_local_dir=''` (checkpoints into the current directory)",
        ("trainer.default_local_dir=''",),
        ("trainer.default_local_dir=''", "must be a directory path"),
    ),
    Case(
        "default_local_dir_is_a_checkpoint",
        "`trainer.default_local_dir=<root>/global_step_2`",
        ("trainer.default_local_dir={ckpt}/global_step_2",),
        ("is a checkpoint, not a checkpoint root", "trainer.resume_from_path=<tmp>/ckpt/global_step_2"),
    ),
    Case(
        "checkpoint_dir_tilde",
        "`trainer.default_local_dir=~/ckpts`",
        ("trainer.default_local_dir=~/dagrl_ckpts",),
        ("trainer.default_local_dir=~/dagrl_ckpts", "write the full path"),
    ),
    Case(
        "shell_variable_in_path",
        "`trainer.default_local_dir=$CKPT/run` that the shell did not expand (single quotes)",
        ("trainer.default_local_dir=$DAGRL_CKPT/run",),
        ("trainer.default_local_dir", "$DAGRL_CKPT", "not expanded", "${oc.env:DAGRL_CKPT}"),
    ),
    Case(
        "checkpoint_dir_url",
        "`trainer.default_local_dir=hdfs://...` (verl's HDFS habit)",
        ("trainer.default_local_dir=hdfs://namenode/user/me/ckpt",),
        ("trainer.default_local_dir", "is a URL (hdfs://)"),
    ),
)
