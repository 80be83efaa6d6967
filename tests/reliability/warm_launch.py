"""Launches of `python -m dagrl.main_dag` forked from a warm process, for the bad-input corpus's hundreds of cases.

A case refused in pre-flight costs about a second of CPU, half of it the interpreter's start and the imports every
launch makes before it reads an argument (Hydra, OmegaConf, dagrl.config: the module-level imports of
dagrl.main_dag) or in pre-flight (dagrl.config.validate, and pyarrow, numpy and jinja2 for the data and chat
template checks). The server (`python -m tests.reliability.warm_launch`) pays them once; it imports nothing heavier
(no torch, transformers, megatron or vllm), so the import probe still sees what a launch imports of those.

Each launch is a fork of it: a process of its own as a fresh one is, in its own session, with the launch's
environment, arguments and stderr file, stdin and stdout on /dev/null, ending with its own exit code, so nothing one
launch changes (logging, signal handlers, environment, Hydra's global state, imported user code) reaches the next.
It runs dagrl.main_dag as `python -m` does (runpy, as __main__) and ends through the interpreter's normal exit, its
atexit handlers included. The import probe (probe/sitecustomize.py) counts the CPU seconds the server spent getting
ready as the launch's own, so the pre-flight CPU budget still holds a fresh launch's cost. None of dagrl's modules
imported here reads the environment at import, so the launch's environment is in place before dagrl reads it.

Protocol: the server writes `ready`, then answers each JSON request line (argv, env, stderr path, timeout) with a
JSON line {"code": exit code, negative for a signal as in subprocess}.
"""

from __future__ import annotations

import json
import os
import resource
import runpy
import select
import signal
import subprocess
import sys
import tempfile
from contextlib import suppress
from pathlib import Path

ROOT = Path(__file__).parents[2]


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _launch(request: dict, ready_cpu: float) -> None:
    """In the forked child: become the launch; never returns (the SystemExit it ends with unwinds the server's loop
    in this process only)."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for fd, target in ((0, null), (1, null), (2, err)):
        os.dup2(target, fd)
    os.close(null)
    os.close(err)
    os.environ.clear()
    os.environ.update(request["env"])
    if probe := request["env"].get("DAGRL_IMPORT_PROBE"):
        import sitecustomize  # the probe's: its folder is on the server's PYTHONPATH, as on a fresh launch's

        sitecustomize.register(probe, cpu_base=ready_cpu)
    sys.argv = ["-m", *request["argv"]]  # runpy puts the module's path first, as `python -m` does
    runpy.run_module("dagrl.main_dag", run_name="__main__", alter_sys=True)
    raise SystemExit(0)  # the module returned: a fresh `python -m` exits 0 here


def _wait(pid: int, timeout: float) -> int:
    """The child's exit code (negative: the signal that ended it); SIGKILL after `timeout` seconds, as
    subprocess's wait would leave it to the caller."""
    pidfd = os.pidfd_open(pid)
    try:
        if not select.select([pidfd], [], [], timeout)[0]:
            with suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    finally:
        os.close(pidfd)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def serve() -> None:
    import dagrl
    import dagrl.main_dag  # what every launch imports before it reads its arguments
    import dagrl.config.tree  # and what pre-flight imports on every launch that reaches it
    import dagrl.config.validate  # noqa: F401
    import jinja2  # noqa: F401 - the chat template's check
    import numpy  # noqa: F401
    import pyarrow.parquet  # noqa: F401 - the data files' checks

    # but not the module itself, which a launch runs as __main__ (as `python -m` does: imported, it is a second copy)
    del sys.modules["dagrl.main_dag"], dagrl.main_dag
    ready_cpu = _cpu_seconds()
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _launch(request, ready_cpu)
        code = _wait(pid, request["timeout"])
        with suppress(ProcessLookupError):  # what the launch left running in its session, as session_process does
            os.killpg(pid, signal.SIGKILL)
        print(json.dumps({"code": code}), flush=True)


class WarmLauncher:
    """One server, one launch at a time: `run(argv, env)` is (exit code, stderr) of `python -m dagrl.main_dag
    *argv` with os.environ plus `env`, as tests.helpers.run_in_session gives it for a fresh process."""

    def __init__(self, env: dict[str, str]) -> None:
        self.errors = tempfile.TemporaryFile("w+")
        path = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), os.environ.get("PYTHONPATH"), str(ROOT)]))
        self.server = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.warm_launch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            env={**os.environ, **env, "PYTHONPATH": path},
            text=True,
        )
        self._expect("ready")

    def _expect(self, what: str) -> str:
        line = self.server.stdout.readline()
        if not line.startswith(what):
            self.errors.seek(0)
            raise RuntimeError(f"the warm launcher said {line!r}, not {what!r}:\n{self.errors.read()[-3000:]}")
        return line

    def run(self, argv: list[str], env: dict[str, str], timeout: float = 300) -> tuple[int, str]:
        with tempfile.NamedTemporaryFile("r", suffix=".stderr") as err:
            request = {"argv": argv, "env": {**os.environ, **env}, "stderr": err.name, "timeout": timeout}
            self.server.stdin.write(json.dumps(request) + "\n")
            self.server.stdin.flush()
            code = json.loads(self._expect("{"))["code"]
            return code, Path(err.name).read_text()

    def close(self) -> None:
        self.server.stdin.close()
        try:
            self.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()
        self.errors.close()


if __name__ == "__main__":
    serve()
