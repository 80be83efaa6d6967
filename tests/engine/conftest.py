import os
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tiny_models, engine_helpers

from world import job_dir

WORLD = Path(__file__).parent / "world.py"


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: multi-process or long engine tests")
    config.addinivalue_line(
        "markers",
        "engine_world(job): the test reads job MODULE:NAME of the shared 2-rank world (the engine_world fixture)",
    )
    # megatron warns at import about missing Apex/TE on CPU.
    warnings.filterwarnings("ignore", message=".*(Apex|Transformer Engine).*")


@dataclass(frozen=True)
class World:
    root: Path
    output: str  # the ends of the launch's stdout and stderr

    def result(self, job: str) -> Path:
        """The directory of `job` after it ran; fails with the launch's output if it did not finish."""
        work_dir = job_dir(self.root, job)
        assert (work_dir / "done").is_file(), f"{job} did not finish in the engine world:\n{self.output}"
        return work_dir


@pytest.fixture(scope="session")
def engine_world(request, tmp_path_factory) -> World:
    """One torchrun launch of world.py (2 ranks) running the job of every selected test marked engine_world, each
    prepared here first by its module's prepare_world_job(NAME, its directory): models, references, checkpoints
    for the ranks to load."""
    modules = {}
    for item in request.session.items:
        for mark in item.iter_markers("engine_world"):
            modules.setdefault(mark.args[0], item.module)
    root = tmp_path_factory.mktemp("engine_world")
    for job, module in modules.items():
        job_dir(root, job).mkdir()
        module.prepare_world_job(job.split(":")[1], job_dir(root, job))
    from engine_helpers import free_port

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
        str(WORLD),
        str(root),
        *modules,
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    return World(root, f"exit code {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}")
