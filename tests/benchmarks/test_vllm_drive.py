"""benchmarks/vllm_drive.py on CPU (vLLM itself runs on the GPU machine): the table from a run's files (medians,
tokens/s, the speed against inproc, a missing mode named), the child commands and the mode check."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import vllm_drive  # noqa: E402 - after the sys.path insert above


def write(out: Path, mode: str, seconds: list[float], tokens: int = 262144) -> None:
    (out / f"{mode}.json").write_text(
        json.dumps({"mode": mode, "seconds": seconds, "tokens": tokens, "startup_s": 40.0})
    )


def test_report_gives_medians_and_speed_against_inproc(tmp_path):
    write(tmp_path, "inproc", [15.0, 14.0, 16.0])
    write(tmp_path, "async_mp", [21.0, 20.0, 30.0])
    table = vllm_drive.report(tmp_path, ["inproc", "detok", "async_mp"])
    rows = {
        line.split(" | ")[0].strip("| "): line.split(" | ") for line in table.splitlines()[2:] if line.startswith("| ")
    }
    assert rows["inproc"][2] == "15.000" and rows["inproc"][6] == "1.000"
    assert rows["async_mp"][2] == "21.000" and rows["async_mp"][3] == "20.000-30.000"
    assert rows["async_mp"][5] == f"{262144 / 21:,.0f}" and rows["async_mp"][6] == f"{15 / 21:.3f}"
    assert table.splitlines()[-1] == "no result for: detok (see their .log)"


def test_dry_run_prints_one_child_per_mode_and_unknown_modes_fail(tmp_path):

    def run(*a):
        command = [sys.executable, "benchmarks/vllm_drive.py", "--out", str(tmp_path), *a]
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True)

    proc = run("--dry-run", "--modes", "inproc,async_mp_final", "--repeats", "2")
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and len(lines) == 2
    assert "--child inproc" in lines[0] and "--child async_mp_final" in lines[1] and "--repeats=2" in lines[1]
    bad = run("--modes", "inproc,http")
    assert bad.returncode != 0 and "--modes: http unknown" in bad.stderr
    missing = run("--model", str(tmp_path / "nothing"), "--tokenizer", str(tmp_path / "none"))
    assert missing.returncode != 0 and "no tokenizer to build it with" in missing.stderr
