"""A Python tool: runs the model's program in a resource-limited subprocess and answers what it printed.

Each call gets a fresh interpreter (`python -I -S -B -u -`, the program on stdin, so only the standard library is
importable) in a new session and process group, a fresh scratch directory as its cwd, HOME and TMPDIR (removed
afterwards), and an environment holding none of the trainer's variables. Limits, set in the child before exec:
wall clock `timeout_s`, then the whole process group is SIGKILLed; CPU seconds `cpu_s` per process (RLIMIT_CPU);
address space `memory_mb` per process (RLIMIT_AS: a large allocation raises MemoryError); `max_processes` more
threads/processes for the uid (RLIMIT_NPROC, counted from the uid's current tasks, since the kernel counts every
task of the uid); `file_size_mb` per written file (RLIMIT_FSIZE); no core dumps; no_new_privs (setuid binaries do
not elevate). At most `max_output_bytes` of stdout+stderr are kept. After every call, timed out or not, the
process group is SIGKILLed and so is any process still carrying the call's marker variable (one that left the
group with setsid), so nothing the program started outlives the call.

When the trainer runs as root it drops the child to `run_as_uid`/`run_as_gid` (default 65534, nobody/nogroup;
null keeps root, and then RLIMIT_NPROC does not apply), because root ignores RLIMIT_NPROC and may read and write
everything. Not being root, the program runs as the trainer's own user: it can read that user's files (tokens,
checkpoints), see and signal the trainer's processes. The interpreter is `python` from the config, else
sys.executable, or /usr/bin/python3 when the uid cannot reach sys.executable (a pyenv under a 0700 /root).

What it does NOT isolate (this is a resource fence for a model's arithmetic scripts, not a security boundary for
hostile code; use a container/gVisor/nsjail or verl's SandboxFusion service for that):
  * the network: the program can open sockets and reach anything the host can;
  * the filesystem outside the scratch directory: every world-readable file can be read, world-writable places
    (/tmp, /dev/shm) written, and the disk filled with many files (RLIMIT_FSIZE bounds each file, not their sum);
  * other processes: /proc lists them all with their command lines; concurrent calls share the uid, so they can
    signal and read each other's scratch directories, and share its RLIMIT_NPROC headroom;
  * the kernel: no seccomp filter, no namespaces or cgroups, so every system call and kernel bug is reachable,
    and memory is bounded per process (RLIMIT_AS x RLIMIT_NPROC), not in total;
  * orphans: killed processes that were reparented are reaped by PID 1; in a container without an init (tini,
    docker run --init) they stay zombies, which count toward the uid's RLIMIT_NPROC;
  * a program that leaves the process group and execs with a new environment escapes the final kill, as does
    everything if the trainer dies mid-call (no PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from typing import Any
from uuid import uuid4

from dagrl.agent.tools import BaseTool, ToolResponse

PYTHON_SCHEMA = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Runs a Python program (standard library only) and returns what it prints (stdout and stderr).",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The program; print the values you need."}},
            "required": ["code"],
        },
    },
}

MARKER = "DAGRL_SANDBOX_ID"  # in every sandboxed environment: the final sweep finds the call's processes by it
NOBODY = 65534
PR_SET_NO_NEW_PRIVS = 38
try:  # looked up before any fork: the child must not load libraries
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _prctl = None


@dataclass
class SandboxResult:
    text: str
    exit_code: int | None  # negative: killed by that signal; None: never started
    timed_out: bool
    truncated_bytes: int
    duration_s: float

    def metrics(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "output_truncated": self.truncated_bytes > 0,
            "duration_s": self.duration_s,
        }


class _Sandboxed(asyncio.SubprocessProtocol):
    """Keeps the first `limit` bytes of the merged stdout/stderr and counts the rest (so the writer never blocks on
    a full pipe and a flood never fills the trainer's memory). `exited` is set when the program's own process
    exits, `closed` once its pipes are closed too: background children holding them keep that from happening,
    which is why asyncio's Process.wait() cannot time the program."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        self.limit, self.data, self.dropped = limit, bytearray(), 0
        self.exited, self.closed = loop.create_future(), loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        keep = max(0, min(len(data), self.limit - len(self.data)))
        self.data += data[:keep]
        self.dropped += len(data) - keep

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


def _enter_sandbox(limits: tuple[tuple[int, int, int], ...], uid: int | None, gid: int | None) -> None:
    """preexec_fn: runs in the forked child before exec, so it imports, allocates and logs nothing (another thread
    of the trainer may have held a lock at fork time)."""
    for which, soft, hard in limits:
        resource.setrlimit(which, (soft, hard))
    if _prctl is not None:
        _prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if uid is not None:  # last: setgroups and setgid need the privilege that setuid gives up
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)


def _tasks_of(uid: int) -> int:
    """Tasks (threads) of `uid`: what the kernel compares with RLIMIT_NPROC."""
    count = 0
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                count += len(os.listdir(f"/proc/{entry.name}/task"))
        except OSError:  # exited while we looked
            continue
    return count


def _kill_all(pgid: int, token: str, uid: int | None) -> None:
    """SIGKILL the call's process group, then every process still carrying its marker (left the group by setsid)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    marker, killed = f"{MARKER}={token}".encode(), set()
    while True:  # again until a pass finds nothing new: one may have forked while the last pass ran
        found = set()
        for entry in os.scandir("/proc"):
            try:
                if (
                    not entry.name.isdigit()
                    or int(entry.name) in killed
                    or (uid is not None and entry.stat().st_uid != uid)
                ):
                    continue
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if marker in f.read().split(b"\0"):
                        os.kill(int(entry.name), signal.SIGKILL)
                        found.add(int(entry.name))
            except OSError:
                continue
        if not found:
            return
        killed |= found


def _reachable(path: str, mode: int) -> bool:
    """Whether other users can reach `path` (exec on every directory above it) and have `mode` on it."""
    path = os.path.realpath(path)
    try:
        if not os.stat(path).st_mode & mode:
            return False
        while path != "/":
            path = os.path.dirname(path)
            if not os.stat(path).st_mode & stat.S_IXOTH:
                return False
    except OSError:
        return False
    return True


def _remove(path: str) -> None:
    try:
        shutil.rmtree(path)
    except OSError:  # the program closed directories to itself (chmod 0): reopen them, never through a link
        for root, dirs, _ in os.walk(path):
            for name in dirs:
                inner = os.path.join(root, name)
                if not os.path.islink(inner):
                    try:
                        os.chmod(inner, 0o700)
                    except OSError:
                        pass
        shutil.rmtree(path, ignore_errors=True)


def _positive(config: dict, name: str, default: float, integer: bool = True) -> Any:
    value = config.get(name, default)
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or value <= 0
        or (integer and value != int(value))
    ):
        raise ValueError(f"config.{name}={value!r} must be a positive {'integer' if integer else 'number'}")
    return int(value) if integer else float(value)


def _id(config: dict, name: str) -> int | None:
    value = config.get(name, NOBODY)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValueError(f"config.{name}={value!r} must be a uid/gid number, or null to keep root")
    return value


class PythonTool(BaseTool):
    """Stateless: every call runs its `code` argument in a fresh sandbox; no step reward."""

    default_schema = PYTHON_SCHEMA

    def __init__(self, config: dict | None, tool_schema: dict | Any | None) -> None:
        super().__init__(config, tool_schema)
        c = self.config
        self.timeout_s = _positive(c, "timeout_s", 5.0, integer=False)
        self.cpu_s = _positive(c, "cpu_s", 5)
        self.memory_mb = _positive(c, "memory_mb", 512)
        self.max_processes = _positive(c, "max_processes", 16)
        self.max_output_bytes = _positive(c, "max_output_bytes", 65536)
        self.file_size_mb = _positive(c, "file_size_mb", 16)
        root = os.geteuid() == 0
        self.uid = _id(c, "run_as_uid") if root else None
        self.gid = _id(c, "run_as_gid") if self.uid is not None else None
        if self.uid is not None and self.gid is None:
            raise ValueError("config.run_as_gid must be a gid number when run_as_uid is set")
        # whose tasks RLIMIT_NPROC counts; root bypasses it, so with run_as_uid null there is no process limit
        self.counted_uid = self.uid if root else os.getuid()
        self.python = str(c["python"]) if c.get("python") else self._default_python()

    def _default_python(self) -> str:
        if self.uid is None or (_reachable(sys.executable, stat.S_IXOTH) and _reachable(os.__file__, stat.S_IROTH)):
            return sys.executable
        for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
            if _reachable(candidate, stat.S_IXOTH):
                return candidate
        raise ValueError(
            f"uid {self.uid} cannot run {sys.executable} (a directory above it is closed to other "
            f"users) and there is no /usr/bin/python3; set config.python to an interpreter it can run"
        )

    def _limits(self) -> tuple[tuple[int, int, int], ...]:
        mb = 1024 * 1024
        wanted = [
            (resource.RLIMIT_CPU, self.cpu_s, self.cpu_s + 1),  # SIGXCPU at the soft limit names the cause
            (resource.RLIMIT_AS, self.memory_mb * mb, self.memory_mb * mb),
            (resource.RLIMIT_FSIZE, self.file_size_mb * mb, self.file_size_mb * mb),
            (resource.RLIMIT_CORE, 0, 0),
        ]
        if self.counted_uid is not None:
            nproc = _tasks_of(self.counted_uid) + self.max_processes
            wanted.append((resource.RLIMIT_NPROC, nproc, nproc))
        limits = []
        for which, soft, hard in wanted:  # never above the trainer's own hard limit: raising it would fail
            _, cap = resource.getrlimit(which)
            if cap != resource.RLIM_INFINITY:
                soft, hard = min(soft, cap), min(hard, cap)
            limits.append((which, soft, hard))
        return tuple(limits)

    def _environment(self, scratch: str, token: str) -> dict[str, str]:
        return {
            "PATH": "/usr/bin:/bin",
            "HOME": scratch,
            "TMPDIR": scratch,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONIOENCODING": "utf-8",
            MARKER: token,
        }

    async def run(self, code: str) -> SandboxResult:
        start, token, loop = time.monotonic(), uuid4().hex, asyncio.get_running_loop()
        scratch = tempfile.mkdtemp(prefix="dagrl-sandbox-")
        transport, finished = None, False
        try:
            if self.uid is not None:
                os.chown(scratch, self.uid, self.gid)
            try:
                transport, sandbox = await loop.subprocess_exec(
                    partial(_Sandboxed, self.max_output_bytes, loop),
                    self.python,
                    "-I",
                    "-S",
                    "-B",
                    "-u",
                    "-",
                    cwd=scratch,
                    env=self._environment(scratch, token),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=partial(_enter_sandbox, self._limits(), self.uid, self.gid),
                )
            except (OSError, subprocess.SubprocessError) as error:  # e.g. EAGAIN: the uid is out of processes
                return SandboxResult(
                    f"error: the sandbox could not start ({type(error).__name__}: {error})",
                    None,
                    False,
                    0,
                    time.monotonic() - start,
                )
            stdin = transport.get_pipe_transport(0)
            stdin.write(code.encode(errors="replace"))
            stdin.close()  # flushed in the background; a program that exits unread just drops it
            await asyncio.wait([sandbox.exited], timeout=self.timeout_s)
            timed_out = not sandbox.exited.done()
            _kill_all(transport.get_pid(), token, self.counted_uid)  # also without a timeout: background children
            finished = True
            await asyncio.wait([sandbox.closed], timeout=2.0)  # the pipe reaches EOF once every holder is dead
            returncode = transport.get_returncode()
            return SandboxResult(
                self._report(sandbox, returncode, timed_out),
                returncode,
                timed_out,
                sandbox.dropped,
                time.monotonic() - start,
            )
        finally:  # also when the caller's own timeout cancels us mid-run
            if transport is not None:
                if not finished:
                    _kill_all(transport.get_pid(), token, self.counted_uid)
                transport.close()
            _remove(scratch)

    def _report(self, capture: _Sandboxed, returncode: int | None, timed_out: bool) -> str:
        text = capture.data.decode("utf-8", errors="replace")
        notes = []
        if capture.dropped:
            notes.append(f"[output truncated: {capture.dropped} more bytes]")
        if timed_out:
            notes.append(f"timeout: killed after {self.timeout_s:g} s")
        elif returncode and returncode < 0:
            name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else -returncode
            cause = f" (cpu time limit of {self.cpu_s} s)" if returncode == -signal.SIGXCPU else ""
            notes.append(f"killed by signal {name}{cause}")
        elif returncode:
            notes.append(f"exit status {returncode}")
        if notes and text and not text.endswith("\n"):
            text += "\n"
        return text + "\n".join(notes) or "(no output)"

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        code = parameters.get("code") if isinstance(parameters, dict) else None
        if not isinstance(code, str):
            return ToolResponse(text='error: call with {"code": "<python program>"}'), 0.0, {}
        result = await self.run(code)
        return ToolResponse(text=result.text), 0.0, result.metrics()
