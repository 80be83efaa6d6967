"""One 2-rank world for every multi-process engine check a test session needs (the `engine_world` fixture of
tests/engine/conftest.py launches it once): starting a world costs each rank megatron-core's import and a
rendezvous, seconds that grow to tens of seconds on a loaded two-core machine, so the checks run one after another
in a single launch instead of a launch each.

usage: torchrun --nproc-per-node 2 world.py ROOT MODULE:NAME [MODULE:NAME ...]
For each job, in order, MODULE.run_world_job(NAME, ROOT/MODULE-NAME) runs on both ranks of the initialized world
(gloo; NCCL on a GPU machine), with rank 0's prints going to stdout.txt there, then rank 0 writes the file `done`
there. A failed check raises: torchrun stops the world, and the jobs after it do not run.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).parent))


def job_dir(root: Path, job: str) -> Path:
    return root / job.replace(":", "-")


def main() -> None:
    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore")
    root, jobs = Path(sys.argv[1]), sys.argv[2:]
    if torch.cuda.is_available():  # on a GPU machine the engines compute on the GPU: NCCL, a device per rank
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    for job in jobs:
        module, name = job.split(":")
        work_dir = job_dir(root, job)
        with contextlib.ExitStack() as stack:
            if dist.get_rank() == 0:
                stack.enter_context(contextlib.redirect_stdout(stack.enter_context(open(work_dir / "stdout.txt", "w"))))
            importlib.import_module(module).run_world_job(name, work_dir)
        dist.barrier()
        if dist.get_rank() == 0:
            (work_dir / "done").write_text("ok")
    dist.destroy_process_group()


if __name__ == "__main__":  # dist_checkpointing's writer processes re-import the modules: no work at import
    main()
