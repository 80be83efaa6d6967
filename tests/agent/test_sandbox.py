"""The python tool's sandbox: output, errors, the wall-clock kill, the process, memory and output limits, the
environment and the scratch directory. Runs as root (CI: the uid drop is exercised) and as a normal user."""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import signal
import tempfile
import time

import pytest

from dagrl.agent.sandbox import PythonTool, SandboxResult

ROOT = os.geteuid() == 0


def sandbox(**config) -> PythonTool:
    return PythonTool(config=config, tool_schema=None)


def run(tool: PythonTool, code: str) -> SandboxResult:
    return asyncio.run(tool.run(code))


@pytest.fixture
def shared_dir():
    """A directory the sandbox's uid can reach (pytest's tmp_path lies under a 0700 directory)."""
    path = tempfile.mkdtemp(prefix="dagrl-test-")
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def live(predicate) -> list[int]:
    """Pids of processes (not zombies) whose /proc/<pid>/stat fields satisfy `predicate(pid, fields)`; fields[0] is
    the state, fields[2] the process group."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in "ZX" and predicate(int(entry.name), fields):
            found.append(int(entry.name))
    return found


def gone_soon(predicate, within: float = 2.0) -> bool:
    deadline = time.monotonic() + within  # SIGKILL is delivered at once, but exiting takes a moment
    while live(predicate):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_prints_output_as_an_unprivileged_user():
    result = run(sandbox(), "import os\nprint(6 * 7)\nprint(os.getuid(), os.getgid(), os.getgroups())")
    uid, gid = (65534, 65534) if ROOT else (os.getuid(), os.getgid())
    lines = result.text.splitlines()
    assert lines[0] == "42" and lines[1].startswith(f"{uid} {gid}")
    if ROOT:
        assert lines[1] == "65534 65534 []"
    assert result.exit_code == 0 and not result.timed_out


def test_execute_answers_errors_as_text_with_the_exit_status():
    tool = sandbox()

    async def calls() -> list:
        return [
            await tool.execute("i", parameters)
            for parameters in ({"code": "print('a'\n"}, {"code": "raise SystemExit(3)"}, {"code": ""}, {})
        ]

    (syntax, _, metrics), (status, _, _), (empty, _, _), (missing, _, _) = asyncio.run(calls())
    assert "SyntaxError" in syntax.text and syntax.text.endswith("exit status 1") and metrics["exit_code"] == 1
    assert status.text == "exit status 3" and empty.text == "(no output)"
    assert missing.text.startswith("error: call with")


def timed_run(tool: PythonTool, code: str) -> tuple[SandboxResult, float]:
    started = time.monotonic()
    result = run(tool, code)
    return result, time.monotonic() - started


def test_an_endless_loop_is_killed_at_the_timeout():
    _, start_up = timed_run(sandbox(), "pass")  # what a call costs on this machine now, however loaded
    result, seconds = timed_run(sandbox(timeout_s=1), "print('started', flush=True)\nwhile True:\n    pass")
    assert seconds < 1 + 2 * start_up + 1.0, (seconds, start_up)  # the timeout, not some later check, ended it
    assert result.timed_out and result.text == "started\ntimeout: killed after 1 s" and result.exit_code == -9


def test_cpu_time_beyond_cpu_s_is_killed_before_the_wall_clock():
    # 1 s of CPU takes longer on a loaded machine; not timed out: the CPU limit, not the wall clock, ended it
    result = run(sandbox(cpu_s=1, timeout_s=120), "while True:\n    pass")
    assert not result.timed_out
    assert result.text == "killed by signal SIGXCPU (cpu time limit of 1 s)" and result.exit_code == -signal.SIGXCPU


FORK_BOMB = """
import os, time
made = refused = 0
for _ in range(200):
    try:
        pid = os.fork()
    except BlockingIOError:
        refused += 1
        continue
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    made += 1
print(made, refused, os.getpgrp())
"""


def test_a_fork_bomb_is_bounded_and_none_of_its_processes_outlive_the_call():
    result, seconds = timed_run(sandbox(max_processes=8, timeout_s=30), FORK_BOMB)
    made, refused, group = map(int, result.text.split())
    # the call returns with the parent: the children, sleeping 60 s with the output pipe open, do not hold it
    assert seconds < 30 and not result.timed_out
    assert refused > 0 and made <= 16  # 8 more tasks for the uid (give or take its other processes meanwhile)
    assert gone_soon(lambda pid, fields: int(fields[2]) == group)


def test_a_process_that_leaves_the_group_is_killed_too():
    code = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    print(os.getpid(), flush=True)\n"
        "    time.sleep(60)\n    os._exit(0)\ntime.sleep(0.2)"
    )
    escapee = int(run(sandbox(), code).text)
    assert gone_soon(lambda pid, fields: pid == escapee)


def test_a_huge_allocation_fails_in_the_sandbox_only():
    before = resource.getrlimit(resource.RLIMIT_AS), resource.getrlimit(resource.RLIMIT_NPROC)
    tool = sandbox(memory_mb=256)
    result = run(tool, "b = bytearray(10 * 1024**3)")
    assert "MemoryError" in result.text and result.exit_code == 1
    assert (resource.getrlimit(resource.RLIMIT_AS), resource.getrlimit(resource.RLIMIT_NPROC)) == before
    assert run(tool, "print(len(bytearray(64 * 1024**2)))").text == f"{64 * 1024**2}\n"  # within the limit


def test_the_trainers_environment_is_not_visible(monkeypatch):
    monkeypatch.setenv("DAGRL_SECRET", "s3cret")
    result = run(sandbox(), "import os\nprint(os.environ.get('DAGRL_SECRET'), sorted(os.environ))")
    assert "s3cret" not in result.text and result.text.startswith("None ")
    assert "DAGRL_SECRET" not in result.text and "'PATH'" in result.text


def test_output_beyond_max_output_bytes_is_truncated():
    result = run(sandbox(max_output_bytes=1000), "import sys\nprint('x' * 5000)\nprint('e' * 100, file=sys.stderr)")
    assert result.text == "x" * 1000 + "\n[output truncated: 4102 more bytes]"
    assert result.truncated_bytes == 4102 and result.exit_code == 0


def test_the_scratch_directory_is_the_cwd_and_is_removed():
    code = (
        "import os\nos.makedirs('a/b')\nopen('a/b/f.txt', 'w').write('data')\nos.chmod('a', 0)\n"
        "print(os.getcwd(), os.environ['HOME'] == os.getcwd())"
    )
    cwd, home_is_cwd = run(sandbox(), code).text.split()
    assert cwd.startswith(os.path.join(tempfile.gettempdir(), "dagrl-sandbox-")) and home_is_cwd == "True"
    assert not os.path.exists(cwd)


def test_a_call_cancelled_by_the_callers_timeout_cleans_up(shared_dir):
    report = os.path.join(shared_dir, "pid")
    code = f"import os, time\nopen({report!r}, 'w').write(f'{{os.getpid()}} {{os.getcwd()}}')\ntime.sleep(60)"

    async def cancelled() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(sandbox(timeout_s=30).run(code), 1.0)

    asyncio.run(cancelled())
    with open(report) as f:
        pid, cwd = f.read().split()
    assert gone_soon(lambda p, fields: p == int(pid)) and not os.path.exists(cwd)


@pytest.mark.skipif(not ROOT, reason="the uid drop happens only as root")
def test_as_root_the_program_cannot_touch_root_files(shared_dir):
    secret = os.path.join(shared_dir, "secret.txt")
    with open(secret, "w") as f:
        f.write("root only")
    os.chmod(secret, 0o600)
    result = run(sandbox(), f"print(open({secret!r}).read())")
    assert "PermissionError" in result.text and "root only" not in result.text
