"""A finished run destroys every process group before the interpreter shuts down (dagrl.utils.dist), so no gloo worker
thread is left to free a collective's tensors then: that aborted a rank after a finished run in CI ("terminate called
without an active exception"). The end-to-end check is in tests/trainer/test_partial_rollout.py."""

import json
import os

import torch.multiprocessing as mp

from tests.engine.engine_helpers import free_port
from tests.trainer.exit_threads import gloo_threads


def _worker(rank: int, port: int, out: str) -> None:
    os.environ.update(
        {
            "RANK": str(rank),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
    )
    from dagrl.engine.megatron.parallel import init_model_parallel
    from dagrl.placement import ParallelLayout
    from dagrl.utils import dist

    dist.init_process_group()
    init_model_parallel(ParallelLayout(), seed=0)  # Megatron's groups, as the engines build them
    import torch.distributed.checkpoint  # noqa: F401 - after the process group, as the first checkpoint save imports it

    dist.all_gather_objects(["uid"] * 8)  # the run's last collective (the partial-rollout buffer's uids)
    running = gloo_threads()
    dist.destroy_process_groups()
    with open(f"{out}/rank{rank}.json", "w", encoding="utf-8") as result:
        json.dump([running, gloo_threads()], result)


def test_destroying_the_process_groups_joins_every_gloo_thread(tmp_path):
    mp.spawn(_worker, args=(free_port(), str(tmp_path)), nprocs=2)
    for rank in range(2):
        running, left = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert running > 4 and left == 0, (rank, running, left)  # the world's group and Megatron's, then none


def test_a_world_of_one_exports_nothing_and_gives_vllm_its_rank(tmp_path):
    # a child process must not read the parent's world as its own launch (it would bind the parent's port); an
    # in-process vLLM engine (external_launcher) still gets RANK and LOCAL_RANK, from the process group
    import subprocess
    import sys

    code = (
        "import os, json\n"
        "from dagrl.engine.megatron.parallel import init_distributed\n"
        "from dagrl.engine.rollout.vllm_start import external_launcher_env\n"
        "init_distributed()\n"
        "import torch.distributed as d\n"
        "names = ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT')\n"
        "exported = [n for n in names if n in os.environ]\n"
        "with external_launcher_env():\n"
        "    inside = {n: os.environ.get(n) for n in ('RANK', 'LOCAL_RANK')}\n"
        "after = [n for n in ('RANK', 'LOCAL_RANK') if n in os.environ]\n"
        "print(json.dumps([d.get_world_size(), exported, inside, after]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    world, exported, inside, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert world == 1 and [n for n in exported if n != "MASTER_ADDR"] == []
    assert inside == {"RANK": "0", "LOCAL_RANK": "0"} and after == []  # while the engine is built, and only then
