"""Pre-flight of the run's layout: the launch's world against trainer.nnodes x trainer.n_gpus_per_node (or the two
pools of actor_rollout_ref.hybrid_engine=false), the rollout pool's keys, and the actor's Megatron layout
(actor_rollout_ref.actor.megatron.*), which the reference, the critic and the teacher reuse."""

from __future__ import annotations

import logging
import os

from dagrl.config.checks import as_config_error, get, positive_int
from dagrl.config.errors import ConfigError, require
from dagrl.config.preflight.actor import check_remove_padding
from dagrl.config.schema.check import default_value
from dagrl.config.tree import Cfg
from dagrl.placement import ParallelLayout, Placement, WorldLayout

logger = logging.getLogger(__name__)


def world_size_from_env(cfg: Cfg) -> int:
    place = placement(cfg)
    launched = os.environ.get("WORLD_SIZE", "1")
    require(
        launched.strip().isdigit() and int(launched) > 0,
        "WORLD_SIZE",
        f"environment variable WORLD_SIZE={launched!r} is not a positive integer: unset it (one process) or let "
        f"torchrun set it (torchrun --nproc-per-node N)",
    )
    expected, actual = place.world_size, int(launched)
    from dagrl.config.launch_env import check_local_world, check_rank_variables

    check_rank_variables(actual)
    nnodes, per_node = cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node
    if not place.is_colocated:
        rollout, train = place.pool("rollout"), place.pool("train")
        require(
            expected == actual,
            "rollout.n_gpus_per_node",
            f"separate pools (actor_rollout_ref.hybrid_engine=false) of rollout.nnodes x rollout.n_gpus_per_node "
            f"= {rollout.size} and trainer.nnodes x trainer.n_gpus_per_node = {train.size} processes need "
            f"{expected} but this launch has {actual}: start torchrun --nproc-per-node {expected}"
            + (
                f", or change rollout.n_gpus_per_node / trainer.n_gpus_per_node to add up to {actual}"
                if actual >= 2
                else ""
            ),
        )
        return actual
    if nnodes == 1:
        # WORLD_SIZE without the LOCAL_RANK torchrun sets beside it: an export left in the shell, not a launch
        leftover = actual > 1 and not (os.environ.get("LOCAL_RANK") or os.environ.get("DAGRL_CHECK_ONLY"))
        require(
            expected == actual or not leftover,
            "WORLD_SIZE",
            f"trainer.nnodes x trainer.n_gpus_per_node = {expected} but the environment has WORLD_SIZE={actual} "
            f"without torchrun's LOCAL_RANK (an export left over from another job?): unset WORLD_SIZE to run one "
            f"process, or start torchrun --nproc-per-node {actual} with trainer.n_gpus_per_node={actual}",
        )
        require(
            expected == actual,
            "trainer.n_gpus_per_node",
            f"trainer.nnodes x trainer.n_gpus_per_node = {expected} but this launch has {actual} process(es): "
            f"start one process per slot (torchrun --nproc-per-node {per_node}) or set "
            f"trainer.n_gpus_per_node={actual}",
        )
        check_local_world(nnodes, per_node, actual)
        return actual
    # trainer.nnodes was set: name it, and suggest only values that change something
    fixes = [f"trainer.nnodes={actual // per_node}"] if actual % per_node == 0 else []
    if actual % nnodes == 0 and actual // nnodes != per_node:
        fixes.append(f"trainer.n_gpus_per_node={actual // nnodes}")
    require(
        expected == actual,
        "trainer.nnodes",
        f"trainer.nnodes={nnodes} x trainer.n_gpus_per_node={per_node} = {expected} but this launch has {actual} "
        f"process(es): start one process per slot (torchrun --nnodes {nnodes} --nproc-per-node {per_node} on "
        f"each node)" + (f" or set {' or '.join(fixes)}" if fixes else ""),
    )
    check_local_world(nnodes, per_node, actual)
    return actual


def placement(cfg: Cfg) -> Placement:
    """The run's pools: trainer.nnodes x trainer.n_gpus_per_node processes that train and generate (colocated), or
    with actor_rollout_ref.hybrid_engine=false a rollout pool of rollout.nnodes x rollout.n_gpus_per_node first."""
    train = positive_int(cfg, "trainer.nnodes"), positive_int(cfg, "trainer.n_gpus_per_node")
    rollout = positive_int(cfg, "rollout.nnodes"), positive_int(cfg, "rollout.n_gpus_per_node")  # checked either way
    return Placement.colocated(*train) if cfg.actor_rollout_ref.hybrid_engine else Placement.split(*rollout, *train)


def planned_world_size(cfg: Cfg) -> int:
    """The world a launch of this config will have (dagrl.plan, the Ray launcher's pre-flight)."""
    return placement(cfg).world_size


def check_rollout_pool_keys(cfg: Cfg) -> None:
    """rollout.nnodes / rollout.n_gpus_per_node size the rollout pool of separate pools only: set on a colocated
    run they would be ignored while the user expects a pool of that size."""
    if cfg.actor_rollout_ref.hybrid_engine is not True:
        return
    changed = [
        f"rollout.{name}={get(cfg, f'rollout.{name}')}"
        for name in ("nnodes", "n_gpus_per_node")
        if get(cfg, f"rollout.{name}") != default_value(f"rollout.{name}")
    ]
    require(
        not changed,
        "rollout.n_gpus_per_node",
        f"{' and '.join(changed)} size the rollout pool of separate pools, but actor_rollout_ref.hybrid_engine="
        f"true (colocated: every process trains and generates), so it would be ignored: set "
        f"actor_rollout_ref.hybrid_engine=false for separate pools, or drop it",
    )


MODEL_PARALLEL_KEYS = tuple(
    f"actor_rollout_ref.actor.megatron.{name}_size"
    for name in ("tensor_model_parallel", "pipeline_model_parallel", "context_parallel")
)


def check_model_parallel(cfg: Cfg, world_size: int, hf_config: dict) -> ParallelLayout:
    """The actor's Megatron layout against the world and the model; a world the TP x PP x CP product does not
    divide names the size(s) the user changed from conf/'s defaults (else the largest)."""
    sizes = {key: positive_int(cfg, key) for key in MODEL_PARALLEL_KEYS}
    check_remove_padding(cfg)
    product = sizes[MODEL_PARALLEL_KEYS[0]] * sizes[MODEL_PARALLEL_KEYS[1]] * sizes[MODEL_PARALLEL_KEYS[2]]
    if world_size % product:
        changed = [key for key, size in sizes.items() if size > 1 and size != default_value(key)]
        keys = changed or [max(sizes, key=sizes.get)]
        raise ConfigError(
            keys[0],
            f"world size by TP x PP x CP ({' x '.join(map(str, sizes.values()))}): "
            f"{world_size} is not divisible by {product}; change {' or '.join(keys)}",
        )
    tp, megatron = sizes[MODEL_PARALLEL_KEYS[0]], "actor_rollout_ref.actor.megatron"
    require(
        tp > 1 or not cfg.actor_rollout_ref.actor.megatron.sequence_parallel,
        f"{megatron}.sequence_parallel",
        f"{megatron}.sequence_parallel=true has no effect with {megatron}.tensor_model_parallel_size=1 (it shards "
        f"activations over the TP ranks): set tensor_model_parallel_size > 1, or sequence_parallel=false",
    )
    from types import SimpleNamespace
    from dagrl.engine.megatron.preflight import check_layout

    parallel = layout_from_config(cfg.actor_rollout_ref.actor.megatron)
    with as_config_error("actor_rollout_ref.actor.megatron"):
        check_layout(SimpleNamespace(_name_or_path=cfg.actor_rollout_ref.model.path, **hf_config), parallel, world_size)
    return parallel


def layout_from_config(megatron: Cfg):
    """The actor's ParallelLayout from actor_rollout_ref.actor.megatron.* (reference and critic reuse it)."""
    from dagrl.placement import PARALLEL_SIZE_NAMES, ParallelLayout

    tp = megatron.tensor_model_parallel_size
    sequence_parallel = bool(megatron.sequence_parallel) and tp > 1
    if megatron.sequence_parallel and tp == 1:
        logger.warning("actor_rollout_ref.actor.megatron.sequence_parallel=true has no effect with TP=1: turned off")
    return ParallelLayout(**{name: megatron[name] for name in PARALLEL_SIZE_NAMES}, sequence_parallel=sequence_parallel)


def world_layout(parallel: ParallelLayout, rollout_tp: int, place: Placement) -> WorldLayout:
    with as_config_error("actor_rollout_ref.actor.megatron"):
        return WorldLayout(place.pool("train").size, parallel, rollout_tp if place.is_colocated else 1)
