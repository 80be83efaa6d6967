"""Importing megatron-core leaves nothing in /tmp: its timers import wandb where it is installed, and `import wandb`
makes two temporary directories that only its exit handler removes (a killed run left them behind)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import os, sys
from dagrl.engine.megatron import compat
compat.import_megatron(keep_wandb={keep})
print(len([name for name in os.listdir(os.environ["TMPDIR"]) if "wandb" in name]), "wandb" in sys.modules)
import wandb  # a user's reward function may still import it
print(wandb.__name__)
"""


@pytest.mark.parametrize("keep", [False, True])
def test_megatron_is_imported_without_wandb_unless_the_run_logs_to_wandb(tmp_path, keep):
    pytest.importorskip("wandb")
    env = {"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(keep=keep)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # a run that logs to wandb imports it (and its two directories) anyway
    assert done.stdout.split() == (["2", "True"] if keep else ["0", "False"]) + ["wandb"]
