"""benchmarks/device/run.sh on a CPU: a job's steps run from the source it names with MODEL, DATA and O set, each
step's output and its line in progress; a failed step makes the run fail; --detach runs a frozen copy of the
source in the background; a missing model, data folder or job stops it with one line. The GPU jobs themselves
parse as bash."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks" / "device" / "run.sh"
JOB = """\
step hello python3 -c 'import os, dagrl; print(dagrl.__path__[0], os.environ["MODEL"], os.environ["DATA"])'
step broken false
gpu_used
"""


@pytest.fixture
def folders(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.parquet").write_bytes(b"")
    (tmp_path / "job.sh").write_text(JOB)
    return tmp_path


def run(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # the jobs' python3: this one
    return subprocess.run(["bash", str(RUN), *map(str, args)], capture_output=True, text=True, env=env)


def test_a_job_runs_its_steps_into_the_output_folder_and_fails_with_a_failed_step(folders):
    out = folders / "out"
    result = run(folders / "job.sh", "--model", folders / "model", "--data", folders / "data", "--out", out)
    assert result.returncode == 1, result.stderr
    progress = (out / "progress").read_text().splitlines()
    assert progress[0].endswith(f"job job (model {folders / 'model'}, data {folders / 'data'})")
    assert [re.sub(r" \d+ s$", "", line.split(" ", 1)[1]) for line in progress[1:5]] == [
        "start hello",
        "done hello rc=0",
        "start broken",
        "done broken rc=1",
    ]
    assert progress[-1].endswith("ALL DONE (failed: broken)")
    package, model, data = (out / "hello.log").read_text().split()
    assert (package, model, data) == (str(ROOT / "dagrl"), str(folders / "model"), str(folders / "data"))
    assert (out / "env.txt").read_text().splitlines()[-1].startswith(f"code: {ROOT}")


def test_detach_runs_a_frozen_copy_of_the_source_in_the_background(folders):
    out = folders / "out"
    result = run(folders / "job.sh", "--model", folders / "model", "--data", folders / "data", "--out", out, "--detach")
    assert result.returncode == 0 and "started in the background" in result.stdout, result.stderr
    wait_all_done(out)
    assert (out / "hello.log").read_text().split()[0] == str(out / "code" / "dagrl")
    assert (out / "code" / "benchmarks" / "device" / "run.sh").read_text() == RUN.read_text()
    assert (out / "code" / ".commit").read_text().strip()


@pytest.mark.parametrize(
    "args, message",
    [
        (["nosuch"], "run.sh: no job nosuch: one of actor_update_profile "),
        (["smollm2_grpo_learn", "--model", "{tmp}/nowhere"], "has no config.json (python3 scripts/smollm2_to_hf.py"),
        (["smollm2_grpo_learn", "--model", "{tmp}/model", "--data", "{tmp}"], "has no train.parquet"),
        (["smollm2_grpo_learn", "--frob"], "run.sh: unknown option --frob"),
    ],
)
def test_what_it_cannot_run_stops_it_with_one_line(folders, args, message):
    result = run(*[a.format(tmp=folders) for a in args], "--out", folders / "out")
    assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1


def test_every_job_parses_and_reads_the_model_and_data_it_is_given():
    jobs = [p for p in sorted(RUN.parent.glob("*.sh")) if p != RUN]
    assert len(jobs) >= 10
    for job in jobs:
        assert subprocess.run(["bash", "-n", str(job)], capture_output=True).returncode == 0, job
        assert "/tmp/smol" not in job.read_text() and "/tmp/data/arithmetic" not in job.read_text(), job


def wait_all_done(out: Path) -> None:
    """Until the detached job's progress says ALL DONE (a minute at most)."""
    deadline = time.time() + 60
    while "ALL DONE" not in ((out / "progress").read_text() if (out / "progress").exists() else ""):
        assert time.time() < deadline, (out / "job.log").read_text()
        time.sleep(0.2)


def committed_checkout(code: Path, files: dict[str, str]) -> Path:
    """A git checkout at `code` holding run.sh, a stand-in dagrl and `files` (path: text), all committed."""
    for path, text in {"dagrl/main_dag.py": "", "benchmarks/device/run.sh": RUN.read_text(), **files}.items():
        (code / path).parent.mkdir(parents=True, exist_ok=True)
        (code / path).write_text(text)
    for command in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"]):
        subprocess.run(["git", "-C", str(code), *command], check=True, capture_output=True)
    return code


def test_detach_reads_a_job_file_the_frozen_copy_leaves_out_where_it_is(folders):
    """A job kept in an ignored folder of the source (not copied into OUT/code) still runs, from where it is."""
    code = committed_checkout(folders / "code", {".gitignore": "/mine/\n", "mine/job.sh": "step hello true\n"})
    out = folders / "out"
    args = ("--model", folders / "model", "--data", folders / "data", "--out", out, "--code", code, "--detach")
    result = run(code / "mine" / "job.sh", *args)
    assert result.returncode == 0, result.stderr
    wait_all_done(out)
    assert not (out / "code" / "mine").exists() and "done hello rc=0" in (out / "progress").read_text()


def test_detach_copies_a_checkout_with_a_deleted_tracked_file_quietly(folders):
    """A tracked file deleted from the work tree is left out of the frozen copy without tar's "Cannot stat"."""
    code = committed_checkout(folders / "code", {"job.sh": "step hello true\n", "gone.txt": ""})
    (code / "gone.txt").unlink()
    out = folders / "out"
    args = ("--model", folders / "model", "--data", folders / "data", "--out", out, "--code", code, "--detach")
    result = run(code / "job.sh", *args)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    wait_all_done(out)
    assert (out / "code" / "job.sh").exists() and not (out / "code" / "gone.txt").exists()
    assert "with uncommitted changes" in (out / "code" / ".commit").read_text()


def test_the_fp8_job_runs_the_shapes_and_models_it_is_asked_for(folders):
    """fp8_one_gpu's SIZES and SYNC_MODELS pick its steps (a stand-in python3 records each command and succeeds)."""
    bin_dir = folders / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/usr/bin/env bash\necho "$*" >> {folders}/commands\n')
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PARTS": "rollout sync", "SIZES": "8b"}
    env["SYNC_MODELS"] = "smollm2 qwen3_moe:30b-a3b:2"
    out = folders / "out"
    args = ["fp8_one_gpu", "--model", folders / "model", "--data", folders / "data", "--out", out]
    done = subprocess.run(["bash", str(RUN), *map(str, args)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    steps = re.findall(r"start (\S+)", (out / "progress").read_text())
    assert steps == ["fp8_rollout8b", "sync_smollm2", "init_qwen3_moe", "sync_qwen3_moe"]
    commands = (folders / "commands").read_text().splitlines()
    assert "--size 8b" in commands[-4] and f"path={folders / 'model'} " in commands[-3]
    assert "--family qwen3_moe --size 30b-a3b --num-layers 2" in commands[-2]
