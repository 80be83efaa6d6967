from __future__ import annotations

from tests.reliability.corpus.case import WORLD, Case, world

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
        env=WORLD,
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
)
