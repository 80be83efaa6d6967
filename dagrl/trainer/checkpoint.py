"""Trainer checkpoints: `<root>/global_step_N/{actor/, critic/, data.pt, dagrl_checkpoint.json}`; `actor/` is the
engine's Megatron dist checkpoint, with `actor/huggingface/` beside its shards when save_contents has hf_model.

A checkpoint is written into `<root>/.tmp_global_step_N` (which gets `.dagrl_partial` first, so that a later run
knows it may remove it), gets its marker file last, and is renamed into place; `latest_checkpointed_iteration.txt`
is replaced atomically after that. A kill at any moment therefore leaves either no `global_step_N` or a complete
one, and resume picks the newest complete checkpoint (the tracker file is kept for verl/siiRL tooling; a directory
newer than the tracker is complete by construction). Pruning moves a checkpoint back under its tmp name before
removing it, so a kill (or a second Ctrl-C) during the removal leaves a partial save, not a checkpoint missing files;
it never follows a symbolic link (a user's `global_step_N -> elsewhere` is resumable and left as it is).

dagrl never deletes or overwrites what it did not write: a `global_step_N` without the marker or a
`.tmp_global_step_N` without `.dagrl_partial` stops the run in pre-flight (`foreign_entries`), and a save never
replaces an existing `global_step_N`.

The marker lists every file of the checkpoint with its size (`files`), so that pre-flight finds a checkpoint damaged
after its save (a truncated or missing shard, a truncated data.pt) before any model is built (`damage`). A damaged
newest checkpoint is never deleted: resuming from the previous complete one (trainer.resume_mode=resume_path)
renames it `global_step_N.damaged` (`set_aside_damaged`). A save checks the free space against the newest
checkpoint's size first, and a disk that fills during the write stops the run in one line (checkpoint_space.py), on
every rank at once where only one rank's disk is full.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Callable, Iterator

from dagrl.config.errors import ConfigError, RunError
from dagrl.config.tree import Cfg
from dagrl.trainer.checkpoint_space import check_free_space, disk_full_error, together

logger = logging.getLogger(__name__)

TRACKER = "latest_checkpointed_iteration.txt"
MARKER = "dagrl_checkpoint.json"
PARTIAL_MARKER = ".dagrl_partial"  # first file of a save in progress: the tmp directory is dagrl's to remove
CONFIG_FILE = "config.json"  # the run's config at save time: what a resume compares its own against
DAMAGED_SUFFIX = ".damaged"  # a damaged checkpoint set aside by a resume from an earlier one (kept, never deleted)
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_TMP_DIR = re.compile(r"^\.tmp_global_step_(\d+)$")
_STAGING_DIR = re.compile(r"^\.tmp_global_step_(\d+)\.new$")  # a tmp directory before its marker is in


def step_dir_name(step: int) -> str:
    return f"global_step_{step}"


def is_complete(path: Path) -> bool:
    return (path / MARKER).is_file()


def complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint under root, oldest first."""
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and child.is_dir() and is_complete(child):
            found.append((int(match.group(1)), child))
    return sorted(found)


def file_sizes(path: Path) -> dict[str, int]:
    """Every regular file under a checkpoint directory (relative path -> bytes), but its markers; symlinks are
    neither followed nor listed."""
    sizes = {}
    for folder, _, names in os.walk(path):
        for name in names:
            full = Path(folder) / name
            if name not in (MARKER, PARTIAL_MARKER) and not full.is_symlink():
                sizes[full.relative_to(path).as_posix()] = full.stat().st_size
    return dict(sorted(sizes.items()))


def recorded_files(path: Path) -> dict[str, int] | None:
    """The files and sizes the marker of the checkpoint at `path` records (None: an unreadable marker, or one of a
    dagrl that did not record them)."""
    try:
        files = json.loads((path / MARKER).read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        return None
    return files if isinstance(files, dict) else None


def damage(path: Path) -> str | None:
    """What is wrong with the complete checkpoint at `path` (the words after "it is damaged: "), None when it is as
    its save wrote it: the marker is dagrl's JSON for the step its directory names, the actor's part and data.pt are
    there, and every file the marker lists has its recorded size (a marker of an older dagrl lists none)."""
    step = int(_STEP_DIR.match(path.name).group(1))
    try:
        recorded = json.loads((path / MARKER).read_text(encoding="utf-8")).get("global_step")
    except (OSError, ValueError, AttributeError) as error:
        return f"its {MARKER} is not the JSON dagrl writes ({type(error).__name__})"
    if recorded != step:
        return f"its {MARKER} records global_step {recorded!r}"
    if not (path / "actor").is_dir():
        return "it has no actor/ directory (the actor's weights)"
    if not (path / "data.pt").is_file():  # the sampler's and KL controller's state
        return "it has no data.pt (the data order and step that a resume restores)"
    for name, size in (recorded_files(path) or {}).items():
        full = path / name
        if not full.is_file():
            return f"{name} is missing (written at save, {size} bytes)"
        now = full.stat().st_size
        if now != size:
            return f"{name} is {now} bytes, {size} when saved ({'truncated' if now < size else 'grown'})"
    return None


def checkpoint_bytes(path: Path) -> int:
    """The size of the checkpoint at `path`, from its marker (else by walking it)."""
    files = recorded_files(path)
    return sum((files if files is not None else file_sizes(path)).values())


def foreign_entries(root: Path) -> list[Path]:
    """Entries under root that use dagrl's checkpoint names but were not written by dagrl: a global_step_N that
    is not a complete checkpoint (another trainer's, a user's files), a .tmp_global_step_N without PARTIAL_MARKER."""
    if not root.is_dir():
        return []
    return sorted(
        child
        for child in root.iterdir()
        if (_STEP_DIR.match(child.name) and not (child.is_dir() and is_complete(child)))
        or (_TMP_DIR.match(child.name) and not (child / PARTIAL_MARKER).is_file())
    )


def partial_saves(root: Path) -> list[Path]:
    """.tmp_global_step_N directories a killed dagrl save left (they hold PARTIAL_MARKER)."""
    if not root.is_dir():
        return []
    return sorted(
        child
        for child in root.iterdir()
        if (_TMP_DIR.match(child.name) or _STAGING_DIR.match(child.name))
        and not child.is_symlink()  # removed with rmtree: never through a link
        and (child / PARTIAL_MARKER).is_file()
    )


def check_resume_path(path: str | None) -> Path:
    """A resume_from_path that is a complete checkpoint, or a ConfigError naming the fix."""
    key = "trainer.resume_from_path"
    if not path:
        raise ConfigError(key, "trainer.resume_mode=resume_path needs trainer.resume_from_path=<dir>/global_step_N")
    resolved = Path(os.path.expanduser(path))
    if not resolved.is_dir():
        raise ConfigError(key, f"{key}={path}: no such directory")
    if not _STEP_DIR.match(resolved.name) or not is_complete(resolved):
        raise ConfigError(
            key,
            f"{key}={path} is not a complete dagrl checkpoint (no {MARKER}); point it at a "
            f"global_step_N directory that has one",
        )
    return resolved


def resume_target(trainer: Cfg) -> Path | None:
    """The checkpoint `trainer.resume_mode` resumes from: trainer.resume_from_path (resume_path), the newest
    complete one under trainer.default_local_dir (auto), or None (disable, or auto before the first save)."""
    if trainer.resume_mode == "disable":
        return None
    if trainer.resume_mode == "resume_path":
        return check_resume_path(trainer.resume_from_path)
    found = complete_checkpoints(Path(os.path.expanduser(trainer.default_local_dir)))
    return found[-1][1] if found else None


def finished_step(trainer: Cfg, total_steps: int) -> int | None:
    """The step of the checkpoint `trainer.resume_mode` resumes from when the run has nothing left to do (it is at
    or past `total_steps`), else None: read from its marker, so a finished run says so before building a model."""
    path = resume_target(trainer)
    if path is None:
        return None
    step = int(json.loads((path / MARKER).read_text())["global_step"])
    return step if step >= total_steps else None


def check_resume(cfg: Cfg, has_critic: bool) -> None:
    """Pre-flight of the checkpoint the run will resume from, so that a mismatch stops it in one line before any
    model is built (the engines would find it only when loading, minutes later): its actor part holds every part
    actor.checkpoint.load_contents asks for, and a run with a critic finds the critic's part."""
    path = resume_target(cfg.trainer)
    if path is None:
        return
    source = "trainer.resume_from_path" if cfg.trainer.resume_mode == "resume_path" else "trainer.default_local_dir"
    if not (path / "actor" / "metadata.json").is_file():  # found from the file alone, before megatron is imported
        fix = (
            "point trainer.resume_from_path at a complete one"
            if source == "trainer.resume_from_path"
            else f"move it out of {path.parent} (or restore it), then rerun"
        )
        raise ConfigError(
            source,
            f"checkpoint {path} is damaged: {path / 'actor'} is not a Megatron dist checkpoint "
            f"(no metadata.json), so the resume would fail; {fix}",
        )
    # reads the checkpoint's common state through megatron (both of its formats); no model is built
    from dagrl.config.checks import as_config_error, as_list
    from dagrl.engine.megatron.checkpoint import restorable_parts, saved_contents

    with as_config_error(source):
        held = saved_contents(str(path / "actor"))
    load_contents = tuple(as_list(cfg.actor_rollout_ref.actor.checkpoint.load_contents))
    with as_config_error("actor_rollout_ref.actor.checkpoint.load_contents"):
        restorable_parts(str(path / "actor"), load_contents, held)
    if has_critic and not (path / "critic").is_dir():
        raise ConfigError(
            source,
            f"{path} has no critic/ checkpoint (saved by a run without a critic): resume a PPO "
            f"run from its own checkpoints",
        )
    from dagrl.trainer.resume_policy import check_changed_settings

    check_changed_settings(path, CONFIG_FILE, cfg.snapshot(), log=os.environ.get("RANK", "0") == "0")


class CheckpointManager:
    """Saves, finds and prunes checkpoints under one root. Rank 0 does the file-system moves."""

    def __init__(
        self,
        root: str,
        keep: int | None,
        rank: int,
        barrier: Callable[[], None],
        gather: Callable[[object], list] | None = None,
    ) -> None:
        self.root = Path(os.path.expanduser(root))
        self.keep = keep
        self.rank = rank
        self.barrier = barrier
        self.gather = gather or _all_gather  # every rank's object in rank order (a save's parts end with one)
        self.linked: set[Path] = set()  # symbolic links pruning left alone (said once each)

    def latest(self) -> tuple[int, Path] | None:
        found = complete_checkpoints(self.root)
        return found[-1] if found else None

    def set_aside_damaged(self, start: Path | None) -> None:
        """Resuming from `start`, an earlier checkpoint than damaged ones in this root (pre-flight allows only that):
        rename each damaged checkpoint after it to global_step_N.damaged, kept for the user, out of the run's way."""
        if self.rank == 0 and start is not None and start.parent.resolve() == self.root.resolve():
            begin = int(_STEP_DIR.match(start.name).group(1))
            for step, path in complete_checkpoints(self.root):
                problem = damage(path) if step > begin else None
                if problem:
                    names = (f"{path.name}{DAMAGED_SUFFIX}{f'.{n}' if n else ''}" for n in range(1000))
                    aside = next(path.with_name(name) for name in names if not path.with_name(name).exists())
                    logger.warning("%s is damaged (%s): kept as %s", path, problem, aside.name)
                    os.rename(path, aside)
        self.barrier()

    def clear_partial(self) -> None:
        """Remove leftovers of a save that was killed (never chosen for resume, never counted as kept)."""
        if self.rank == 0:
            for child in partial_saves(self.root):
                logger.warning("removing partial checkpoint %s left by an interrupted save", child)
                shutil.rmtree(child)
        self.barrier()

    def save(self, step: int, write: Callable[[Path], None], hooks: Callable[[str], None] | None = None) -> Path:
        """Write a checkpoint through `write(tmp_dir)` (called on every rank) and publish it atomically.
        Raises RunError, before writing anything, where the step's name is taken (pre-flight refuses that; this
        holds for entries that appear while the run goes on)."""
        final = self.root / step_dir_name(step)
        tmp = self.root / f".tmp_{step_dir_name(step)}"
        staging = tmp.with_name(tmp.name + ".new")
        taken = [path for path in (final, tmp, staging) if path.exists() and path not in partial_saves(self.root)]
        if taken:
            raise RunError(
                f"cannot save step {step}: {taken[0]} already exists and dagrl never overwrites it; "
                f"move it away and relaunch (the run resumes from its newest complete checkpoint)"
            )
        latest = self.latest()
        kept = latest[1] if latest is not None else None
        needed = checkpoint_bytes(kept) if kept is not None else None
        # each part ends with every rank's outcome shared (checkpoint_space.together): one rank's full disk stops all
        # of them at once; the space is checked by every rank before rank 0 creates the tmp directory
        together(lambda: needed is None or check_free_space(self.root, step, needed, kept), self.gather)
        together(lambda: self.rank != 0 or self._stage(tmp, staging, hooks), self.gather)

        def written() -> None:
            with _disk_full_stops(tmp, step, kept, needed):
                write(tmp)

        together(written, self.gather)
        together(lambda: self.rank != 0 or self._publish(step, tmp, final, kept, needed, hooks), self.gather)
        return final

    def _stage(self, tmp: Path, staging: Path, hooks: Callable[[str], None] | None) -> None:
        """Rank 0: the empty tmp directory the save writes into."""
        _fault("before_shards", hooks)
        if tmp.exists():
            shutil.rmtree(tmp)
        # the marker goes in before the directory takes dagrl's tmp name, so a kill at any moment leaves
        # nothing a later run would take for someone else's
        if staging.exists():
            shutil.rmtree(staging)
        staging.mkdir(parents=True)
        (staging / PARTIAL_MARKER).touch()
        os.rename(staging, tmp)

    def _publish(
        self, step: int, tmp: Path, final: Path, kept: Path | None, needed: int | None, hooks: Callable | None
    ) -> None:
        """Rank 0, once every rank wrote its part: the marker, the rename into place, the tracker, the pruning."""
        _fault("before_marker", hooks)
        with _disk_full_stops(tmp, step, kept, needed):
            (tmp / MARKER).write_text(json.dumps({"global_step": step, "files": file_sizes(tmp)}))
        _fsync_dir(tmp)
        os.rename(tmp, final)  # never over an existing directory (checked above; rename fails if one appeared)
        (final / PARTIAL_MARKER).unlink()  # after the rename: a tmp directory always holds it
        _fsync_dir(self.root)
        _fault("before_tracker", hooks)
        tracker_tmp = self.root / f".{TRACKER}.tmp"
        tracker_tmp.write_text(str(step))
        os.replace(tracker_tmp, self.root / TRACKER)
        logger.info(
            "saved the checkpoint of step %d to %s (%s)",
            step,
            final,
            ", ".join(sorted(p.name for p in final.iterdir() if p.name not in (MARKER, PARTIAL_MARKER))),
        )
        self._prune()

    def _prune(self) -> None:
        if not self.keep or self.keep <= 0:
            return
        found = complete_checkpoints(self.root)
        for step, path in found[: max(len(found) - self.keep, 0)]:
            if path.is_symlink():  # a user's link to a checkpoint elsewhere: neither it nor its target is ours
                if path not in self.linked:
                    logger.info("not removing %s: a symbolic link (to %s), left as it is", path, os.readlink(path))
                    self.linked.add(path)
                continue
            logger.info("removing old checkpoint %s (trainer.max_actor_ckpt_to_keep=%d)", path, self.keep)
            # a partial save while it goes (see the module doc), never a global_step_N missing files
            (path / PARTIAL_MARKER).touch()
            doomed = self.root / f".tmp_{path.name}"
            if doomed.exists():
                shutil.rmtree(doomed)
            os.rename(path, doomed)
            shutil.rmtree(doomed)


@contextlib.contextmanager
def _disk_full_stops(tmp: Path, step: int, latest: Path | None, needed: int | None) -> Iterator[None]:
    """A full disk while writing the save into `tmp` becomes the one-line RunError; any other error passes on."""
    try:
        yield
    except Exception as error:
        full = disk_full_error(error, tmp, step, latest, needed)
        if full is None:
            raise
        raise full from error


def _all_gather(obj: object) -> list:
    from dagrl.utils import dist  # torch: not for pre-flight, which reads checkpoints through this module

    return dist.all_gather_objects(obj)


def _fault(phase: str, hooks: Callable[[str], None] | None) -> None:
    if hooks is not None:
        hooks(phase)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
