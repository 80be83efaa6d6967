"""Pre-flight of the checkpoint keys of trainer.*: where checkpoints go (and what there must never be touched) and
what a resume starts from (what the actor saves and loads is config/preflight/actor.py's)."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from dagrl.config.checks import as_list
from dagrl.config.errors import ConfigError, require
from dagrl.config.path_values import check_writable_dir
from dagrl.config.tree import Cfg

logger = logging.getLogger(__name__)


def check_output_dirs(cfg: Cfg) -> None:
    """Where the run writes besides its checkpoints: every output-directory key is checked by its schema kind in
    path_values.check_path_values; what is left is TensorBoard's directory taken from the environment."""
    trainer = cfg.trainer
    from_env = os.environ.get("TENSORBOARD_DIR")
    if trainer.tensorboard_dir is None and "tensorboard" in as_list(trainer.logger) and from_env:
        check_writable_dir(
            "trainer.tensorboard_dir", os.environ["TENSORBOARD_DIR"], "tensorboard directory ($TENSORBOARD_DIR)"
        )


def check_checkpoint_dir(cfg: Cfg) -> None:
    """The checkpoint root can be written, and nothing in it that dagrl did not write (or that is newer than the
    checkpoint a resume starts from) could be deleted or overwritten by this run."""
    configured = cfg.trainer.default_local_dir
    require(
        isinstance(configured, str) and configured.strip() != "",
        "trainer.default_local_dir",
        f"trainer.default_local_dir={configured!r} must be a directory path (an empty one would write "
        f"checkpoints into the current directory)",
    )
    root = check_writable_dir("trainer.default_local_dir", configured, "checkpoint directory")
    from dagrl.trainer.checkpoint import MARKER, check_resume_path, complete_checkpoints, damage, foreign_entries

    check_not_inside_checkpoint(root)
    foreign = foreign_entries(root)
    require(
        not foreign,
        "trainer.default_local_dir",
        f"trainer.default_local_dir={root} holds {', '.join(p.name for p in foreign)}, not written by dagrl (no "
        f"{MARKER}); dagrl never deletes or overwrites it: move it away or choose another "
        "trainer.default_local_dir",
    )
    given = cfg.trainer.resume_from_path if cfg.trainer.resume_mode == "resume_path" else None
    start = Path(os.path.expanduser(str(given))) if given else None
    in_root = start is not None and start.parent.resolve() == root.resolve()
    check_markers(root, start if in_root and re.fullmatch(r"global_step_\d+", start.name) else None)
    from dagrl.trainer.checkpoint import TRACKER

    tracker = root / TRACKER  # replaced after every save (for verl's tooling): a directory there fails the first save
    require(
        not tracker.exists() or tracker.is_file(),
        "trainer.default_local_dir",
        f"{tracker} in trainer.default_local_dir is not a file: every checkpoint save replaces it with the newest "
        f"step, and would fail after the step trained; remove or move it away",
    )
    check_run_dir_contents(root, tracker, cfg.trainer.resume_mode)
    if cfg.trainer.resume_mode == "resume_path":
        given = cfg.trainer.resume_from_path
        require(
            not given or Path(os.path.expanduser(str(given))).is_dir(),
            "trainer.resume_from_path",
            f"trainer.resume_from_path={given}: no such directory{relative_hint(str(given))}; point it at a "
            f"checkpoint directory, e.g. {root / 'global_step_N'} (or resume the newest with "
            f"trainer.resume_mode=auto)",
        )
        start = check_resume_path(given)
        start_step = int(start.name.rsplit("_", 1)[1])
        # damaged ones after it are set aside by the run, not overwritten (check_markers)
        newer = [path for step, path in complete_checkpoints(root) if step > start_step and damage(path) is None]
        require(
            not newer,
            "trainer.resume_from_path",
            f"trainer.resume_from_path={start} is older than {newer[-1] if newer else ''} in "
            f"trainer.default_local_dir, which the resumed run would overwrite: set trainer.default_local_dir "
            f"to a new directory for this branch of the run, or resume the newest with trainer.resume_mode=auto",
        )
    else:
        require(
            cfg.trainer.resume_from_path is None,
            "trainer.resume_from_path",
            f"trainer.resume_from_path is set but trainer.resume_mode={cfg.trainer.resume_mode}: "
            f"set trainer.resume_mode=resume_path to use it, or drop resume_from_path",
        )
    if cfg.trainer.resume_mode == "disable":
        found = complete_checkpoints(root)
        require(
            not found,
            "trainer.resume_mode",
            f"trainer.resume_mode=disable but {root} already holds checkpoints "
            f"(newest: {found[-1][1].name if found else ''}) "
            f"that a new run would overwrite: use resume_mode=auto or a new trainer.default_local_dir",
        )


def check_run_dir_contents(root: Path, tracker: Path, resume_mode: str) -> None:
    """A checkpoint root holds runs, not their inputs: a model (config.json beside weights) or data files there mean
    the path was swapped with model.path or data.train_files, and checkpoints would be mixed into them. And its
    tracker file must not name a step newer than every complete checkpoint: an auto resume would then silently start
    from an older one (or from scratch) while the user expects that step (a kill between a checkpoint's rename and
    the tracker update leaves the tracker older, never newer)."""
    if not root.is_dir():
        return
    names = {child.name for child in root.iterdir()}
    weights = sorted(n for n in names if n.endswith((".safetensors", ".bin", ".gguf")))
    data = sorted(n for n in names if n.endswith((".parquet", ".arrow")))
    found = (["config.json", *weights[:2]] if "config.json" in names and weights else []) + data[:2]
    require(
        not found,
        "trainer.default_local_dir",
        f"trainer.default_local_dir={root} holds {', '.join(found)}: a {'model' if weights else 'data'} directory, "
        "not a checkpoint root (swapped with "
        f"{'actor_rollout_ref.model.path' if weights else 'data.train_files'}?); "
        f"checkpoints would be written among those files: choose a directory of the run's own",
    )
    if resume_mode != "auto" or not tracker.is_file():
        return
    text = tracker.read_text(encoding="utf-8", errors="replace").strip()
    require(
        not text or text.isdigit(),
        "trainer.default_local_dir",
        f"{tracker} holds {text[:40]!r}, not a step number (the tracker holds the newest step alone, e.g. 2; "
        f"another tool or a hand wrote this): trainer.resume_mode=auto cannot follow it; write the step number "
        f"into it, or remove the file (auto then resumes from the newest complete global_step_N)",
    )
    from dagrl.trainer.checkpoint import complete_checkpoints

    newest = max((step for step, _ in complete_checkpoints(root)), default=0)
    require(
        not text.isdigit() or int(text) <= newest,
        "trainer.default_local_dir",
        f"{tracker} names step {text}, but {root} has no complete global_step_{text} (newest complete: "
        f"{newest or 'none'}): trainer.resume_mode=auto would start from "
        f"{f'step {newest}' if newest else 'scratch'}; "
        f"restore global_step_{text}, or remove the tracker file to accept that",
    )


def check_not_inside_checkpoint(root: Path) -> None:
    """trainer.default_local_dir is a checkpoint root, not a checkpoint (or a directory in one): a user who points
    it at global_step_N to resume from it would have the run write its own checkpoints, data cache and metrics into
    that checkpoint (dagrl's, or another trainer's global_step_N / HF Trainer's checkpoint-N)."""
    from dagrl.trainer.checkpoint import MARKER, PARTIAL_MARKER

    resolved = Path(os.path.abspath(root))
    for path in [resolved, *resolved.parents]:
        ours = (path / MARKER).is_file() or (path / PARTIAL_MARKER).is_file()
        named = re.fullmatch(r"(\.tmp_)?global_step_\d+|checkpoint-\d+", path.name) is not None and path.is_dir()
        if not (ours or named):
            continue
        where = "is" if path == resolved else f"is inside {path}, which is"
        resume = (
            f" (to resume from it: trainer.resume_mode=resume_path trainer.resume_from_path={path})"
            if ours or path.name.startswith("global_step_")
            else ""
        )
        raise ConfigError(
            "trainer.default_local_dir",
            f"trainer.default_local_dir={root} {where} a checkpoint, not a checkpoint root: the run "
            f"would write its own checkpoints and files into it; set trainer.default_local_dir="
            f"{path.parent}"
            f"{resume} or a new directory",
        )


def relative_hint(path: str) -> str:
    if path in ("None", "none", "null", "~"):
        return " (a literal string; null is written trainer.resume_from_path=null)"
    return "" if os.path.isabs(os.path.expanduser(path)) else " (a relative path: read from the current directory)"


def check_markers(root: Path, start: Path | None) -> None:
    """Each complete checkpoint is as dagrl wrote it (trainer/checkpoint.py `damage`): a resume (or the pruning of
    old checkpoints) would otherwise fail once models are built. dagrl does not touch a damaged one; a damaged newest
    one is named with the previous complete one, which trainer.resume_from_path resumes from (`start`: then the
    damaged ones after it are set aside by the run)."""
    from dagrl.trainer.checkpoint import DAMAGED_SUFFIX, complete_checkpoints, damage

    found = [(step, path, damage(path)) for step, path in complete_checkpoints(root)]
    begin = int(start.name.rsplit("_", 1)[1]) if start is not None else None
    for index, (step, path, problem) in enumerate(found):
        if problem is None or (begin is not None and step > begin):
            continue
        newest = all(later is not None for _, _, later in found[index + 1 :])
        intact = [earlier for _, earlier, was in found[:index] if was is None]
        if not newest:
            fix = f"move it out of {root} (or restore it), then rerun"
        elif intact:
            fix = (
                f"the previous complete checkpoint is {intact[-1].name}: resume from it with "
                f"trainer.resume_mode=resume_path trainer.resume_from_path={intact[-1]} (the damaged one is "
                f"kept, renamed {path.name}{DAMAGED_SUFFIX}), or restore {path.name}"
            )
        else:
            fix = f"there is no earlier complete checkpoint: restore it, or move it out of {root} to start afresh"
        raise ConfigError(
            "trainer.default_local_dir",
            f"checkpoint {path} in trainer.default_local_dir is damaged: {problem}; a resume would fail after "
            f"the models are built; {fix}",
        )


def say_keep_all(cfg: Cfg) -> None:
    """trainer.max_actor_ckpt_to_keep at 0 or below prunes nothing (verl's meaning of 0): every checkpoint stays,
    which a user asking for none, or for only the last, would not expect of the number."""
    keep = cfg.trainer.max_actor_ckpt_to_keep
    if isinstance(keep, int) and not isinstance(keep, bool) and keep <= 0:
        logger.warning(
            "trainer.max_actor_ckpt_to_keep=%d keeps every checkpoint (as in verl, 0 or below means no limit, like "
            "null); to keep only the newest N set trainer.max_actor_ckpt_to_keep=N (N >= 1)",
            keep,
        )
