"""benchmarks/verl_kit/build.sh on the GPU side: `unpack` takes tools/airgap parts into $VERL_HOME and installs
their wheels into $VERL_HOME/site, `status` says whether it is complete, and `env` puts that site ahead of the
caller's path (benchmarks/vs_verl.py runs verl's side after it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.tools.test_airgap import airgap, tiny_wheel

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "benchmarks" / "verl_kit" / "build.sh"


def build(*args, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "VERL_HOME": str(home), "PYTHON": sys.executable, "PYTHONPATH": "/elsewhere"}
    return subprocess.run(["bash", str(BUILD), *map(str, args)], capture_output=True, text=True, env=env)


def test_parts_unpack_into_verl_home_and_env_puts_its_site_first(tmp_path):
    home = tmp_path / "verl"
    tiny_wheel(tmp_path / "wheels")
    airgap("pack", "--out", tmp_path / "pack", "--name", "verl", "--part-mb", 0.001, "--wheels", tmp_path / "wheels")
    parts = sorted((tmp_path / "pack").glob("part*"))
    assert len(parts) >= 2
    assert build("status", home=home).returncode == 1
    first = build("unpack", parts[0], home=home)
    assert first.returncode == 0 and "verl: 1 of" in first.stdout, first.stderr
    assert build("status", home=home).returncode == 1
    done = build("unpack", *parts[1:], home=home)
    assert done.returncode == 0 and f"1 wheel(s) installed into {home / 'site'}" in done.stdout, done.stderr
    assert build("status", home=home).returncode == 0
    env = build("env", home=home).stdout
    shell = subprocess.run(
        ["bash", "-c", f'{env}\npython3 -c "import sys, tinypkg; print(tinypkg.VALUE, *sys.path[1:3])"'],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": "/elsewhere", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    assert shell.stdout.split() == ["42", str(home / "site"), "/elsewhere"], shell.stderr
    assert "HF_HUB_OFFLINE=1" in env
