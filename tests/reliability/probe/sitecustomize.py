"""Imported at start-up by every Python whose PYTHONPATH holds this folder (the bad-input tests' subprocesses).

With DAGRL_IMPORT_PROBE=<file> set, it writes to <file> at exit which heavy packages the process imported and the
CPU seconds it used, so a test can prove an error came before megatron or vllm was loaded, on a busy machine too.
A launch forked from a warm process (tests/reliability/warm_launch.py) registers itself with `register`, adding the
CPU seconds its parent spent getting ready, which a fresh process would have spent itself.
"""

import atexit
import json
import os
import resource
import sys
import time

_HEAVY = {"megatron", "vllm", "torch", "transformers"}


def _write(path: str, started: float, cpu_base: float) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(path, "w", encoding="utf-8") as out:
        json.dump(
            {
                "imported": sorted({name.split(".")[0] for name in sys.modules} & _HEAVY),
                "cpu_s": cpu_base + usage.ru_utime + usage.ru_stime,
                "wall_s": time.monotonic() - started,
            },
            out,
        )


def register(path: str, cpu_base: float = 0.0) -> None:
    """Write the record to `path` at this process's exit."""
    atexit.register(_write, path, time.monotonic(), cpu_base)


if os.environ.get("DAGRL_IMPORT_PROBE"):
    register(os.environ["DAGRL_IMPORT_PROBE"])
