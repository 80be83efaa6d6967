"""File makers for everything else: text files, links, pipes, and changes to the checkpoint directory."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

from tests.reliability.corpus.case import Paths
from tests.reliability.corpus.texts import REWARD_NO_KWARGS


def text_file(name: str, text: str) -> Callable[[Path, Paths], None]:
    def make(ws: Path, paths: Paths) -> None:
        (ws / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / name).write_text(text)

    return make


def step_dir(name: str, complete: bool) -> Callable[[Path, Paths], None]:
    """{ws}/other/<name>: a user's files under a checkpoint name, or (complete) a stand-in dagrl checkpoint."""

    def make(ws: Path, paths: Paths) -> None:
        target = ws / "other" / name
        target.mkdir(parents=True)
        if complete:  # the marker dagrl writes, beside the actor's part
            step = int(name.rsplit("_", 1)[1])
            (target / "actor").mkdir()
            (target / "dagrl_checkpoint.json").write_text(json.dumps({"global_step": step}))
        else:
            (target / "notes.txt").write_text("{}")

    return make


def fifo(name: str = "bad.parquet") -> Callable[[Path, Paths], None]:
    """{ws}/<name>: a named pipe (opening it for reading waits for a writer forever)."""

    def make(ws: Path, paths: Paths) -> None:
        import os

        os.mkfifo(ws / name)

    return make


def _tracker_only(ws: Path, paths: Paths) -> None:
    """{ws}/run: a tracker file naming step 7 and no global_step_7 (the checkpoint deleted or never copied)."""
    (ws / "run").mkdir()
    (ws / "run" / "latest_checkpointed_iteration.txt").write_text("7")


def _tracker_text(ws: Path, paths: Paths) -> None:
    """{ws}/run: a tracker file holding a directory name, not a step number (another tool's, or typed by hand)."""
    (ws / "run").mkdir()
    (ws / "run" / "latest_checkpointed_iteration.txt").write_text("global_step_2\n")


def in_checkpoints(change: Callable[[Path], None]) -> Callable[[Path, Paths], None]:
    """A change to trainer.default_local_dir ({ckpt}), which holds a complete global_step_2."""

    def make(ws: Path, paths: Paths) -> None:
        change(paths.ckpt)

    return make


def _marker_cut(root: Path) -> None:
    (root / "global_step_2" / "dagrl_checkpoint.json").write_text('{"global_step": ')


def _marker_without_actor(root: Path) -> None:
    (root / "global_step_4").mkdir()
    (root / "global_step_4" / "dagrl_checkpoint.json").write_text(json.dumps({"global_step": 4}))


def _marker_other_step(root: Path) -> None:
    shutil.copytree(root / "global_step_2", root / "global_step_6")
    (root / "global_step_6" / "dagrl_checkpoint.json").write_text(json.dumps({"global_step": 3}))


def symlink(name: str, target: str) -> Callable[[Path, Paths], None]:
    def make(ws: Path, paths: Paths) -> None:
        import os

        os.symlink(ws / target, ws / name)

    return make


def latin1_file(name: str, text: str) -> Callable[[Path, Paths], None]:
    def make(ws: Path, paths: Paths) -> None:
        (ws / name).write_bytes(text.encode("latin-1"))

    return make


def reward_package(ws: Path, paths: Paths) -> None:
    (ws / "my_reward").mkdir()
    (ws / "my_reward" / "__init__.py").write_text("")
    (ws / "my_reward" / "math_reward.py").write_text(REWARD_NO_KWARGS)


def _actor_without_metadata(root: Path) -> None:
    """global_step_4: dagrl's marker and data.pt, and an actor/ without Megatron's metadata.json."""
    (root / "global_step_4" / "actor").mkdir(parents=True)
    (root / "global_step_4" / "data.pt").write_bytes(b"x" * 64)
    (root / "global_step_4" / "dagrl_checkpoint.json").write_text(json.dumps({"global_step": 4}))


def _tracker_directory(root: Path) -> None:
    (root / "latest_checkpointed_iteration.txt").unlink()
    (root / "latest_checkpointed_iteration.txt").mkdir()


def symlink_loop(name: str) -> Callable[[Path, Paths], None]:
    def make(ws: Path, paths: Paths) -> None:
        import os

        os.symlink(ws / name, ws / name)

    return make


HELD_PORTS: list = []  # sockets a case keeps listening while its run starts


def port_in_use(port: int) -> Callable[[Path, Paths], None]:
    """Another process's server on `port` (this test process listens there until it ends)."""

    def make(ws: Path, paths: Paths) -> None:
        import socket

        server = socket.socket()
        try:
            server.bind(("", port))
            server.listen()
        except OSError:  # in use already: the case holds either way
            server.close()
            return
        HELD_PORTS.append(server)

    return make


def folder(name: str) -> Callable[[Path, Paths], None]:
    def make(ws: Path, paths: Paths) -> None:
        (ws / name).mkdir(parents=True)

    return make
