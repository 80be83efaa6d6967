"""Pre-flight: every rule that can be checked before a model is built, in one place.

Used by the trainer and by `python3 -m dagrl.plan`. Imports neither megatron nor vllm, so a bad config fails in
about a second (exit code 2) with one line per independent problem, each naming the key or file and the fix.
"""

from __future__ import annotations

import logging
import os

from dagrl.config import (
    async_checks,
    checkpoints,
    cross_checks,
    distill_checks,
    inert_keys,
    model_files,
    model_shapes,
    path_values,
    profiler_checks,
    reward_checks,
    sections,
)
from dagrl.config.plugins import import_plugins
from dagrl.config.schema import check as schema
from dagrl.config.checks import (
    alias,
    as_config_error,
    as_list,
    check_finite_numbers,
    divides,
    layout_from_config,
    positive_int,
)
from dagrl.config.errors import SKIPPED, ConfigError, Problems, require
from dagrl.config.loggers import check_loggers
from dagrl.config.model_dir import check_tokenizer_files, read_hf_config
from dagrl.config.sections import graph_roles
from dagrl.config.shape import RunShape
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


def check_position_limit(total: int, hf_config: dict) -> None:
    """A prompt + response longer than the model's positions (max_position_embeddings, x a rope scaling factor)."""
    limit = model_shapes.position_limit(hf_config)
    require(
        not isinstance(limit, int) or total <= limit,
        "data.max_response_length",
        f"data.max_prompt_length + data.max_response_length = {total} is longer than the model's "
        f"max_position_embeddings={limit} (config.json of actor_rollout_ref.model.path): lower "
        f"data.max_prompt_length or data.max_response_length",
    )


MODEL_PARALLEL_KEYS = tuple(
    f"actor_rollout_ref.actor.megatron.{name}_size"
    for name in ("tensor_model_parallel", "pipeline_model_parallel", "context_parallel")
)


def check_model_parallel(cfg: Cfg, world_size: int, hf_config: dict) -> ParallelLayout:
    """The actor's Megatron layout against the world and the model; a world the TP x PP x CP product does not
    divide names the size(s) the user changed from conf/'s defaults (else the largest)."""
    sizes = {key: positive_int(cfg, key) for key in MODEL_PARALLEL_KEYS}
    sections.check_remove_padding(cfg)
    product = sizes[MODEL_PARALLEL_KEYS[0]] * sizes[MODEL_PARALLEL_KEYS[1]] * sizes[MODEL_PARALLEL_KEYS[2]]
    if world_size % product:
        changed = [key for key, size in sizes.items() if size > 1 and size != schema.default_value(key)]
        keys = changed or [max(sizes, key=sizes.get)]
        raise ConfigError(
            keys[0],
            f"world size by TP x PP x CP ({' x '.join(map(str, sizes.values()))}): "
            f"{world_size} is not divisible by {product}; change {' or '.join(keys)}",
        )
    from types import SimpleNamespace
    from dagrl.engine.megatron.preflight import check_layout

    parallel = layout_from_config(cfg.actor_rollout_ref.actor.megatron)
    with as_config_error("actor_rollout_ref.actor.megatron"):
        check_layout(SimpleNamespace(_name_or_path=cfg.actor_rollout_ref.model.path, **hf_config), parallel, world_size)
    return parallel


def check_rollout_tp(cfg: Cfg, parallel: ParallelLayout, place: Placement) -> int:
    rollout = cfg.actor_rollout_ref.rollout
    rollout_tp = rollout.tensor_model_parallel_size or parallel.tensor_model_parallel_size
    require(
        rollout.name != "hf" or rollout_tp == 1,
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        f"the hf rollout runs one full model per rank: set actor_rollout_ref.rollout.tensor_model_parallel_size=1 "
        f"(now {rollout_tp}) or use rollout.name=vllm",
    )
    divides(
        place.pool("rollout").size,
        rollout_tp,
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "world size by rollout TP" if place.is_colocated else "the rollout pool's processes by rollout TP",
    )
    return rollout_tp


def check_rollout_heads(cfg: Cfg, rollout_tp: int, hf_config: dict) -> None:
    """vLLM splits the attention heads over its TP ranks and refuses a TP that does not divide them (found on a GPU
    only once the actor was built); KV heads fewer than the TP are replicated, so the TP must be their multiple."""
    key = "actor_rollout_ref.rollout.tensor_model_parallel_size"
    if cfg.actor_rollout_ref.rollout.name != "vllm" or rollout_tp == 1:
        return
    heads = hf_config.get("num_attention_heads")
    if not isinstance(heads, int) or heads < 1:
        return  # reported by the model checks
    kv_heads = hf_config.get("num_key_value_heads") or heads

    def splits_kv(tp: int) -> bool:
        return kv_heads % tp == 0 if kv_heads >= tp else tp % kv_heads == 0

    if heads % rollout_tp == 0 and splits_kv(rollout_tp):
        return
    divisors = ", ".join(str(d) for d in range(1, heads + 1) if heads % d == 0 and splits_kv(d))
    require(
        heads % rollout_tp == 0,
        key,
        f"{key}={rollout_tp} does not divide the model's num_attention_heads={heads} "
        f"(vLLM splits the heads over its TP ranks): pick one of {divisors}",
    )
    raise ConfigError(
        key,
        f"{key}={rollout_tp} neither divides nor is a multiple of the model's num_key_value_heads="
        f"{kv_heads} (vLLM splits or replicates the KV heads): pick one of {divisors}",
    )


def world_layout(parallel: ParallelLayout, rollout_tp: int, place: Placement) -> WorldLayout:
    with as_config_error("actor_rollout_ref.actor.megatron"):
        return WorldLayout(place.pool("train").size, parallel, rollout_tp if place.is_colocated else 1)


def check_lengths(cfg: Cfg) -> tuple[int, int]:
    prompt_length = alias(cfg, "data.max_prompt_length", "actor_rollout_ref.rollout.prompt_length")
    response_length = alias(cfg, "data.max_response_length", "actor_rollout_ref.rollout.response_length")
    positive_int(cfg, "data.max_prompt_length")
    positive_int(cfg, "data.max_response_length")
    return prompt_length, response_length


def check_actor(cfg: Cfg, hf_config: dict):
    """The actor's own keys; returns its grad clip."""
    grad_clip = alias(cfg, "actor_rollout_ref.actor.grad_clip", "actor_rollout_ref.actor.optim.clip_grad")
    sections.check_optim(cfg, "actor_rollout_ref.actor.optim")
    actor = cfg.actor_rollout_ref.actor
    # the ratio is clipped to [1 - low, 1 + high]: a low >= 1 (a percentage? 20 for 0.2) clips nothing below;
    # CISPO alone means that (no lower bound on its detached weight)
    low_key = "actor_rollout_ref.actor.clip_ratio" + ("" if actor.clip_ratio_low is None else "_low")
    low = actor.clip_ratio if actor.clip_ratio_low is None else actor.clip_ratio_low
    require(
        actor.policy_loss.loss_mode == "cispo" or not isinstance(low, (int, float)) or low < 1,
        low_key,
        f"{low_key}={low} puts the PPO clip's lower bound 1 - {low} at or below 0, so it clips nothing: set it "
        f"in [0, 1), e.g. 0.2 (a fraction, not a percentage)",
    )
    top = cfg.actor_rollout_ref.model.trainable_top_layers
    layers = hf_config.get("num_hidden_layers", 0)
    require(
        top is None or (isinstance(top, int) and 0 < top <= layers),
        "actor_rollout_ref.model.trainable_top_layers",
        f"actor_rollout_ref.model.trainable_top_layers={top} must be null or in 1..{layers}",
    )
    require(
        top is None or not actor.megatron.use_distributed_optimizer,
        "actor_rollout_ref.model.trainable_top_layers",
        "actor_rollout_ref.model.trainable_top_layers is not supported with "
        "actor_rollout_ref.actor.megatron.use_distributed_optimizer=true yet: set one of them off",
    )
    return grad_clip


def check_overlong_buffer(cfg: Cfg, response_length: int) -> None:
    buffer = cfg.reward_model.overlong_buffer
    require(
        not buffer.enable or 0 < buffer.len < response_length,
        "reward_model.overlong_buffer.len",
        f"reward_model.overlong_buffer.len={buffer.len} must be in 1..{response_length - 1} when enabled",
    )


def check_data(cfg: Cfg) -> int:
    train_rows = sections.check_paths(cfg)
    require(
        train_rows >= cfg.data.train_batch_size,
        "data.train_batch_size",
        f"data.train_batch_size={cfg.data.train_batch_size} is larger than the {train_rows} training rows",
    )
    return train_rows


def preflight(cfg: Cfg, world_size: int | None = None) -> RunShape:
    """Validate everything checkable before models are built; raise ConfigError naming every independent problem
    (ConfigErrors, one line each, when there are several; see checks.Problems for what is skipped).

    `world_size` given: planning a launch from elsewhere (python3 -m dagrl.plan), so the checks of this process's
    own environment (its WORLD_SIZE, vLLM / wandb / mlflow installed) are skipped."""
    problems = Problems()
    check = problems.run
    check(import_plugins, cfg)  # their registrations before any name is checked
    check_finite_numbers(cfg, problems)
    schema.check_schema(cfg.snapshot(), problems)  # every key's type and range (dagrl/config/schema/)
    check(schema.check_sampling, cfg)
    path_values.check_path_values(cfg, problems)  # every path key by its kind, before checks that open the paths
    check(path_values.check_code_paths, cfg)
    check(sections.check_choices, cfg)
    check(sections.check_algorithm, cfg)
    planning = world_size is not None
    check(check_loggers, cfg, check_installed=not planning)
    launch_size = world_size if planning else check(world_size_from_env, cfg)
    place = check(lambda _: placement(cfg), launch_size)  # the actor's checks below see its own pool
    world_size = SKIPPED if place is SKIPPED else place.pool("train").size
    hf_config = check(lambda: read_hf_config(cfg.actor_rollout_ref.model.path))
    if not planning:  # a plan needs only config.json (the model may not be on the planning machine)
        model_path = cfg.actor_rollout_ref.model.path
        check(lambda _: check_tokenizer_files(model_path), hf_config)
        check(lambda _: model_files.check_json_files(model_path), hf_config)
        check(lambda _: model_files.check_chat_template_syntax(model_path), hf_config)
        check(model_files.check_vocab, model_path, hf_config)
        check(model_files.check_special_ids, model_path, hf_config)
        if not cfg.actor_rollout_ref.actor.megatron.use_dist_checkpointing:  # else the weights come from there
            check(lambda _: model_files.check_weight_files(model_path), hf_config)
            check(model_shapes.check_weight_shapes, model_path, hf_config)
    check(sections.check_run_length_and_sampling, cfg)
    parallel = check(check_model_parallel, cfg, world_size, hf_config)
    rollout_tp = check(check_rollout_tp, cfg, parallel, place)
    check(check_rollout_heads, cfg, rollout_tp, hf_config)
    world = check(world_layout, parallel, rollout_tp, place)
    check(
        lambda world, place: sections.check_batches(cfg, world, rollout_dp=place.pool("rollout").size // rollout_tp),
        world,
        place,
    )
    lengths = check(check_lengths, cfg)
    sequence_length = SKIPPED if lengths is SKIPPED else sum(lengths)
    check(check_position_limit, sequence_length, hf_config)
    check(sections.check_dynamic_batching, cfg, sequence_length)
    critic_grad_clip = check(sections.check_critic, cfg, hf_config, world)
    check(model_shapes.check_critic_model, cfg.critic.model.path, sequence_length, hf_config)
    check(lambda: distill_checks.check_graph(cfg, graph_roles(cfg)))
    check(distill_checks.check_teacher, cfg, hf_config, parallel, world_size, sequence_length, planning)
    grad_clip = check(check_actor, cfg, hf_config)
    check(check_overlong_buffer, cfg, SKIPPED if lengths is SKIPPED else lengths[1])
    check(cross_checks.check_overlong_manager, cfg)
    check(cross_checks.check_async_reward, cfg)
    check(cross_checks.check_rollout_pool_keys, cfg)
    check(cross_checks.check_transformer_overrides, cfg)
    check(cross_checks.check_greedy_groups, cfg)
    check(cross_checks.check_reward_name_without_path, cfg)
    for prefix in ("actor_rollout_ref.actor.optim", "critic.optim"):  # a floor above the peak is wrong under any
        check(cross_checks.check_lr_floor, cfg, prefix)  # schedule: said before "has no effect"
    check(inert_keys.check_inert_keys, cfg, set(problems.keys))  # a key set while what reads it is off
    check(sections.check_filter_groups, cfg)
    check(async_checks.check_async_training, cfg)
    from dagrl.agent.setup import check_multi_turn

    check(check_multi_turn, cfg)
    check(sections.check_graph_nodes, cfg, launch_size)
    from dagrl.dag.graph import preflight_graph  # user node functions' signatures, the pipeline factory's dry call

    check(preflight_graph, cfg.dag)
    check(sections.check_launcher, cfg)
    check(profiler_checks.check_global_profiler, cfg, launch_size)
    max_model_len = check(sections.check_rollout_engine, cfg, sequence_length, check_installed=not planning)
    if planning and not any(os.path.exists(path) for path in as_list(cfg.data.train_files)):
        train_rows = None  # a layout needs the model's config, not the data: the plan says what it cannot count
    else:
        train_rows = check(check_data, cfg)
        check(cross_checks.check_profiled_steps, cfg, train_rows)
        check(cross_checks.check_critic_warmup, cfg, train_rows)
        check(lambda _: reward_checks.check_builtin_scorers(cfg), train_rows)
    check(checkpoints.check_checkpoint_dir, cfg)
    check(checkpoints.check_output_dirs, cfg)
    check(checkpoints.check_actor_checkpoint, cfg)
    if not problems.errors:  # the resume compares its checkpoint with this config: only with a config that passed
        from dagrl.trainer.checkpoint import check_resume

        check(lambda: check_resume(cfg, has_critic="critic" in graph_roles(cfg)))
    problems.raise_if_any()

    prompt_length, response_length = lengths
    shape = RunShape(
        world_size=world_size,
        rollout_tp=rollout_tp,
        prompt_length=prompt_length,
        response_length=response_length,
        grad_clip=grad_clip,
        train_rows=train_rows,
        hf_config=hf_config,
        max_model_len=max_model_len,
        critic_grad_clip=critic_grad_clip,
        parallel=parallel,
        placement=place,
    )
    if place.is_colocated:
        return shape
    from dagrl.placement.bridge import global_rank  # this process's pool; a plan describes the training pool

    return shape.in_pool("train" if planning else place.pool_of(global_rank()).name)
