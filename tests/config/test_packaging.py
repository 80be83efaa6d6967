"""A built wheel carries conf/ as dagrl/conf, and the configs compose from it outside the checkout."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_ships_configs_and_composes(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(tmp_path.glob("dagrl-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    conf_files = sorted(str(p.relative_to(ROOT / "conf")) for p in (ROOT / "conf").rglob("*.yaml"))
    assert (
        sorted(n[len("dagrl/conf/") :] for n in names if n.startswith("dagrl/conf/") and n.endswith(".yaml"))
        == conf_files
    )
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = (
        "from dagrl.config.load import CONF_DIR, compose; "
        "assert 'site' in str(CONF_DIR), CONF_DIR; "
        "print(compose(['trainer.total_epochs=9'])['trainer']['total_epochs'])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "9"
