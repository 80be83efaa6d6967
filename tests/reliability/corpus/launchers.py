from __future__ import annotations

from tests.reliability.corpus.case import STARTUP, WORLD, Case, world
from tests.reliability.corpus.file_makers import port_in_use

HAND_EXPORTED = {**WORLD, "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
TOPIC = "Launchers and clusters (trainer.launcher, trainer.nnodes, the launch's processes)"
CASES: tuple[Case, ...] = (
    Case(
        "launcher_capitalised",
        "`trainer.launcher=Ray`",
        ("trainer.launcher=Ray",),
        ("trainer.launcher='Ray'", "local, ray"),
    ),
    Case("nnodes_fraction", "`trainer.nnodes=1.5`", ("trainer.nnodes=1.5",), ("trainer.nnodes=1.5",)),
    Case(
        "gpus_per_node_negative",
        "`trainer.n_gpus_per_node=-1`",
        ("trainer.n_gpus_per_node=-1",),
        ("trainer.n_gpus_per_node=-1",),
    ),
    Case(
        "world_larger_than_n_gpus",
        "a 2-process launch with trainer.n_gpus_per_node=1",
        (),
        ("this launch has 2 process(es)", "set trainer.n_gpus_per_node=2"),
        env={**WORLD, "LOCAL_RANK": "0"},  # torchrun's, beside WORLD_SIZE
    ),
    Case(
        "world_size_exported_by_hand",
        "`export WORLD_SIZE=2` and one process started without torchrun",
        (*world(2), "trainer.default_local_dir={ws}/run"),
        ("WORLD_SIZE=2 is set but RANK, MASTER_ADDR, MASTER_PORT are not", "torchrun --nproc-per-node 2"),
        env=WORLD,
    ),
    Case(
        "nnodes_without_processes",
        "`trainer.nnodes=2` on a one-process launch",
        ("trainer.nnodes=2",),
        ("trainer.nnodes=2", "torchrun --nnodes 2", "set trainer.nnodes=1"),
    ),
    Case(
        "nnodes_two_on_one_node",
        "`trainer.nnodes=2 trainer.n_gpus_per_node=2` on a 2-process (one node) launch",
        ("trainer.nnodes=2", *world(2)),
        (
            "trainer.nnodes=2 x trainer.n_gpus_per_node=2 = 4",
            "2 process(es)",
            "set trainer.nnodes=1 or trainer.n_gpus_per_node=1",
        ),
        env=WORLD,
    ),
    Case(
        "local_world_not_gpus_per_node",
        "`trainer.nnodes=2` while the launch puts both processes on one node (LOCAL_WORLD_SIZE=2)",
        ("trainer.nnodes=2",),
        ("LOCAL_WORLD_SIZE=2 process(es) on each node", "set trainer.nnodes=1 trainer.n_gpus_per_node=2"),
        env={"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"},
    ),
    Case(
        "ray_address_with_local_launcher",
        "`trainer.ray_address=...` with trainer.launcher=local (ignored)",
        ("trainer.ray_address=127.0.0.1:6379",),
        ("trainer.ray_address is set", "set trainer.launcher=ray"),
    ),
    Case(
        "ray_two_nodes_without_cluster",
        "`trainer.launcher=ray trainer.nnodes=2` with no Ray cluster running",
        ("trainer.launcher=ray", "trainer.nnodes=2", "trainer.default_local_dir={ws}/run"),
        ("trainer.nnodes=2", "needs a running Ray cluster", "ray start --head"),
    ),
    Case(
        "ray_address_unreachable",
        "`trainer.ray_address` where no Ray head listens (ray.init retries for minutes)",
        ("trainer.launcher=ray", "trainer.ray_address=127.0.0.1:1", "trainer.default_local_dir={ws}/run"),
        ("trainer.ray_address=127.0.0.1:1", "no Ray head reachable", "within 5 s"),
    ),
    Case(
        "master_port_in_use",
        "a hand-exported 2-rank environment whose MASTER_PORT another process listens on",
        (*world(2), "trainer.default_local_dir={ws}/run"),
        ("MASTER_PORT=29649 is in use on this machine", "export a free port", "ss -ltnp | grep :29649"),
        make=port_in_use(29649),
        env={**HAND_EXPORTED, "RANK": "0", "MASTER_PORT": "29649"},
    ),
    Case(
        "peer_rank_never_comes",
        "a hand-exported 2-rank environment, rank 0 started alone",
        (*world(2), "actor_rollout_ref.nccl_timeout=2"),
        ("rank 0 could not join", "WORLD_SIZE=2 at MASTER_ADDR:MASTER_PORT=127.0.0.1:29647 within 2 s", "RANK 0..1"),
        env={**HAND_EXPORTED, "RANK": "0", "MASTER_PORT": "29647"},
        code=1,
        found=STARTUP,
    ),
    Case(
        "rank_zero_never_comes",
        "a hand-exported 2-rank environment, rank 1 started alone",
        (*world(2), "actor_rollout_ref.nccl_timeout=2"),
        ("rank 1 could not join", "rank 0 never listened", "MASTER_ADDR:MASTER_PORT=127.0.0.1:29648"),
        env={**HAND_EXPORTED, "RANK": "1", "LOCAL_RANK": "1", "MASTER_PORT": "29648"},
        code=1,
        found=STARTUP,
    ),
)
