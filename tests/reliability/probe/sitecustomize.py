"""Imported at start-up by every Python whose PYTHONPATH holds this folder (the bad-input tests' subprocesses).

With DAGRL_IMPORT_PROBE=<file> set, it writes to <file> at exit which heavy packages the process imported and the
CPU seconds it used, so a test can prove an error came before megatron or vllm was loaded, on a busy machine too.
"""

import atexit
import json
import os
import resource
import sys
import time

_HEAVY = {"megatron", "vllm", "torch", "transformers"}
_PROBE = os.environ.get("DAGRL_IMPORT_PROBE")


def _write(started: float) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with open(_PROBE, "w", encoding="utf-8") as out:
        json.dump(
            {
                "imported": sorted({name.split(".")[0] for name in sys.modules} & _HEAVY),
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "wall_s": time.monotonic() - started,
            },
            out,
        )


if _PROBE:
    atexit.register(_write, time.monotonic())
