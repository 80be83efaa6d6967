from __future__ import annotations

from tests.reliability.corpus.case import WORLD, Case

TOPIC = "Asynchronous training"
CASES: tuple[Case, ...] = (
    Case(
        "oversample_without_partial",
        "`async_training.oversample_ratio=2` with partial_rollout off",
        ("async_training.oversample_ratio=2",),
        ("async_training.oversample_ratio", "partial_rollout=true"),
    ),
    Case(
        "oversample_below_one",
        "`async_training.oversample_ratio=0.5`",
        ("async_training.partial_rollout=true", "async_training.oversample_ratio=0.5"),
        ("async_training.oversample_ratio", ">= 1"),
    ),
    Case(
        "negative_staleness",
        "`async_training.max_staleness=-1`",
        ("async_training.max_staleness=-1",),
        ("async_training.max_staleness", "integer >= 0"),
    ),
    Case(
        "partial_rollout_not_bool",
        "`async_training.partial_rollout=maybe`",
        ("async_training.partial_rollout=maybe",),
        ("async_training.partial_rollout", "true or false"),
    ),
    Case(
        "partial_rollout_with_dynamic_sampling",
        "partial rollout with DAPO's dynamic sampling",
        ("async_training.partial_rollout=true", "dag=dapo", "algorithm.filter_groups.enable=true"),
        ("async_training.partial_rollout", "filter_groups.enable"),
    ),
    Case(
        "verl_staleness_threshold",
        "verl's `async_training.staleness_threshold=0.5`",
        ("async_training.staleness_threshold=0.5",),
        ("async_training.staleness_threshold", "max_staleness=K"),
    ),
    Case(
        "verl_require_batches",
        "verl's `async_training.require_batches=2`",
        ("async_training.require_batches=2",),
        ("async_training.require_batches", "oversample_ratio"),
    ),
    Case(
        "sync_step_deadlock",
        "`trigger_parameter_sync_step=3` with `max_staleness=1` (separate pools)",
        (
            "actor_rollout_ref.hybrid_engine=false",
            "async_training.trigger_parameter_sync_step=3",
            "async_training.max_staleness=1",
        ),
        ("trigger_parameter_sync_step=3", "deadlock", "max_staleness >= 2"),
        env=WORLD,
    ),
    Case(
        "sync_step_colocated",
        "`trigger_parameter_sync_step=2` on a colocated run",
        ("async_training.trigger_parameter_sync_step=2",),
        ("trigger_parameter_sync_step=2", "set it to 1"),
    ),
    Case(
        "max_restarts_under_torchrun",
        "`trainer.max_restarts=2` without the Ray launcher",
        ("trainer.max_restarts=2",),
        ("trainer.max_restarts=2", "--max-restarts=2"),
    ),
    Case(
        "pools_one_process",
        "separate pools (`actor_rollout_ref.hybrid_engine=false`) launched as one process",
        ("actor_rollout_ref.hybrid_engine=false",),
        ("rollout.n_gpus_per_node", "need 2", "--nproc-per-node 2"),
    ),
    Case(
        "sync_step_on_colocated_run",
        "`trigger_parameter_sync_step=4` on a colocated run",
        ("async_training.trigger_parameter_sync_step=4",),
        ("a colocated run syncs", "set it to 1"),
    ),
    Case(
        "rollout_pool_size_colocated",
        "`rollout.n_gpus_per_node=4` on a colocated run (it sizes separate pools only)",
        ("rollout.n_gpus_per_node=4",),
        ("rollout.n_gpus_per_node=4", "actor_rollout_ref.hybrid_engine=false"),
    ),
    Case(
        "rollout_pool_zero",
        "`rollout.n_gpus_per_node=0` with separate pools",
        ("actor_rollout_ref.hybrid_engine=false", "rollout.n_gpus_per_node=0"),
        ("rollout.n_gpus_per_node=0",),
    ),
    Case(
        "oversample_beyond_the_data",
        "`async_training.oversample_ratio=100` with partial rollout (more groups in flight than prompts)",
        ("async_training.partial_rollout=true", "async_training.oversample_ratio=100"),
        ("async_training.oversample_ratio=100", "more than the 32 training prompts", "at most 8"),
    ),
)
