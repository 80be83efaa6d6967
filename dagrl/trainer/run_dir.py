"""The run directory (trainer.default_local_dir) is one run's: resolved to an absolute path once at start, locked
by the run's rank 0 before anything is written into it, and given to one job of a Hydra sweep only.

The lock is `<run dir>/.dagrl_lock`: an flock held for the life of the process (the kernel lets it go when the
process dies, however it dies) and a record of its owner (pid, host, start time) that names it to a second launch.
A run that ends empties the record, one stopped by a signal marks it; a record left non-empty with the flock free is
a killed or stopped run's, taken over and said so (its metrics and ledger rows after its last checkpoint run again).
Standard library only at import: main_dag imports this before Hydra has composed anything.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path

from dagrl.config.errors import ConfigError

logger = logging.getLogger(__name__)

KEY = "trainer.default_local_dir"
LOCK_FILE = ".dagrl_lock"
METRICS_FILE = "metrics.jsonl"  # the jsonl logger's rows
_held: dict[str, int] = {}  # run directory -> the descriptor holding its flock, in this process


def absolute(path: str) -> str:
    """`path` with ~ expanded, made absolute against the current directory now (a scorer or tool that later calls
    os.chdir must not move the checkpoints)."""
    return os.path.abspath(os.path.expanduser(path))


def resolve(cfg_data: dict) -> None:
    """Fix trainer.default_local_dir to an absolute path in the plain config, once pre-flight accepted it: every
    later reader (a Ray worker, a checkpoint save after a scorer's os.chdir) sees the directory the launch meant."""
    trainer = cfg_data.get("trainer")
    value = trainer.get("default_local_dir") if isinstance(trainer, dict) else None
    if isinstance(value, str) and value.strip():
        trainer["default_local_dir"] = absolute(value)


def owner(root: str | Path) -> dict | None:
    """The lock record in `root` (pid, host, started), or None where there is none or it is empty (a run that
    ended)."""
    try:
        text = (Path(root) / LOCK_FILE).read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return {"pid": "?", "host": "?", "started": text[:40]}
    return record if isinstance(record, dict) else {"pid": "?", "host": "?", "started": text[:40]}


def describe(record: dict) -> str:
    return f"pid {record.get('pid')} on {record.get('host')} (started {record.get('started')})"


def take(root: str) -> None:
    """Lock `root` for this process (created if missing), or raise ConfigError naming the run that holds it. Rank 0
    alone calls this: the other ranks of a run write nothing before rank 0 has passed this point."""
    root = absolute(root)
    if root in _held:
        return
    Path(root).mkdir(parents=True, exist_ok=True)
    path = os.path.join(root, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise in_use(root) from None
    except OSError as error:  # a file system without flock (some network mounts): say so rather than run unguarded
        os.close(fd)
        raise ConfigError(
            KEY,
            f"{KEY}={root}: cannot lock {path} ({error.strerror}); dagrl locks its run directory so that a second "
            f"launch cannot overwrite this one: choose a {KEY} on a local or flock-capable file system",
        ) from None
    stale = owner(root)
    if stale is not None and stale.get("stopped"):
        logger.info("%s: relaunched after %s, which stopped on %s", root, describe(stale), stale["stopped"])
    elif stale is not None:
        logger.warning(
            "%s: took over the lock of %s, which is no longer running (killed, or its machine went down)",
            root,
            describe(stale),
        )
    record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
    os.fsync(fd)
    _held[root] = fd


def in_use(root: str) -> ConfigError:
    path = os.path.join(root, LOCK_FILE)
    return ConfigError(
        KEY,
        f"{KEY}={root} is in use by another dagrl run, {describe(owner(root) or {})} (lock {path}): two runs in "
        f"one directory overwrite each other's checkpoints and rows; wait for it to end or stop it, or choose "
        f"another {KEY}",
    )


def check_free(root: str) -> None:
    """Raise take's ConfigError where another process holds `root`'s lock, taking nothing (a Ray driver, before it
    starts workers whose rank 0 takes the lock)."""
    root = absolute(root)
    try:
        fd = os.open(os.path.join(root, LOCK_FILE), os.O_RDONLY)
    except OSError:  # no lock file (or no directory yet): nobody holds it
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise in_use(root) from None
    except OSError:  # no flock here: the worker that takes the lock says so
        pass
    finally:
        os.close(fd)  # drops the probe's flock with it


def release(root: str, stopped: str | None = None) -> None:
    """End this process's hold on `root`, then let the flock go. The record is emptied (the run ended), or, where a
    stop signal (`stopped`) ended it, kept and marked: a run stopped to be relaunched, whose rows after its last
    checkpoint (a validation before its first step) the relaunch may replace."""
    fd = _held.pop(absolute(root), None) if isinstance(root, str) else None
    if fd is None:  # not held here: another rank, or a run refused before it took the lock
        return
    try:
        if stopped:
            record = {**json.loads(os.pread(fd, 4096, 0) or b"{}"), "stopped": stopped}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        else:
            os.ftruncate(fd, 0)
        os.fsync(fd)
    finally:
        os.close(fd)  # closing the last descriptor drops the flock


def check_multirun(overrides: list[str], default: str) -> None:
    """A Hydra sweep (-m) runs its jobs one after another into trainer.default_local_dir: unless that directory
    differs per job, the second job would resume from the first's checkpoint (or find its rows) under other
    settings. It differs where its value interpolates ${hydra:...} (job.num, job.override_dirname) or a swept key
    (the default, checkpoints/${trainer.project_name}/${trainer.experiment_name}, with the experiment name swept),
    or where it is swept itself. `default`: the value in conf/ (used where no override sets it)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    swept = {override.key_or_group for override in parsed if override.is_sweep_override()}
    if not swept or KEY in swept:
        return
    given = [override.input_line.split("=", 1)[1] for override in parsed if override.key_or_group == KEY]
    value = given[-1] if given else default
    if "${hydra:" in value.replace(" ", "") or any(f"${{{key}}}" in value for key in swept):
        return
    raise ConfigError(
        KEY,
        f"-m sweeps {', '.join(sorted(swept))} but every job would run in {KEY}={value}: the second job would "
        f"resume from the first's checkpoint or refuse its rows; give each job its own directory, e.g. "
        f"'{KEY}={value.rstrip('/')}/${{hydra:job.num}}'",
    )


def conf_default() -> str:
    """trainer.default_local_dir as conf/ writes it, interpolations unresolved."""
    from omegaconf import OmegaConf

    from dagrl.config.conf_dir import CONF_DIR

    return str(OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR) / "trainer" / "default.yaml"))[KEY.split(".")[1]])
