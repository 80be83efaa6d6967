"""`python -m tests.trainer.exit_threads key=value ...`: dagrl.main_dag, then one stderr line counting the gloo worker
threads still alive when the interpreter begins to shut down. A process group that outlives the run leaves its
threads there, and one still freeing its last collective's tensors then aborts the process ("terminate called without
an active exception")."""

import atexit
import os
import sys


def gloo_threads() -> int:
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm", encoding="utf-8") as comm:
                names.append(comm.read().strip())
        except FileNotFoundError:  # a thread that ended while we looked
            pass
    return sum(name.startswith(("pt_gloo", "gloo_")) for name in names)  # torch's worker and gloo's transport threads


def report() -> None:
    print(f"gloo threads at exit: {gloo_threads()}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    atexit.register(report)  # registered first, so it runs last: after every handler the run registered
    from dagrl.main_dag import main

    main()
