"""Pre-flight: every rule that can be checked before a model is built, run in one order.

The rules live with the section that owns them (dagrl/config/preflight/<section>.py; a key's own type, range and
choices are its declaration's, dagrl/config/schema/); the order below is what a user sees first when several fail.
Used by the trainer and by `python3 -m dagrl.plan`. Imports neither megatron nor vllm, so a bad config fails in
about a second (exit code 2) with one line per independent problem, each naming the key or file and the fix.
"""

from __future__ import annotations

import os

from dagrl.config import inert_keys, model_files, model_shapes, path_values
from dagrl.config.checks import as_list, check_finite_numbers
from dagrl.config.errors import SKIPPED, Problems
from dagrl.config.model_dir import check_tokenizer_files, read_hf_config
from dagrl.config.plugins import import_plugins
from dagrl.config.preflight import (
    actor,
    algorithm,
    async_training,
    batches,
    checkpoints,
    critic,
    data,
    distillation,
    fp8,
    graph,
    layout,
    lora,
    optim,
    profiler,
    reward,
    rollout,
    trainer,
    transformer_config,
)
from dagrl.config.preflight.layout import placement, planned_world_size
from dagrl.config.schema import check as schema
from dagrl.config.shape import RunShape
from dagrl.config.tree import Cfg

__all__ = ["placement", "planned_world_size", "preflight"]  # what the launchers and dagrl.plan import from here


def preflight(cfg: Cfg, world_size: int | None = None) -> RunShape:
    """Validate everything checkable before models are built; raise ConfigError naming every independent problem
    (ConfigErrors, one line each, when there are several; see errors.Problems for what is skipped).

    `world_size` given: planning a launch from elsewhere (python3 -m dagrl.plan), so the checks of this process's
    own environment (its WORLD_SIZE, vLLM / wandb / mlflow installed) are skipped."""
    problems = Problems()
    check = problems.run
    check(import_plugins, cfg)  # their registrations before any name is checked
    check_finite_numbers(cfg, problems)
    schema.check_schema(cfg.snapshot(), problems)  # every key's type and range (dagrl/config/schema/)
    check(rollout.check_sampling, cfg)
    check(trainer.check_run_dir_location, cfg)  # before its writability: / and ~ are writable, and wrong
    path_values.check_path_values(cfg, problems)  # every path key by its kind, before checks that open the paths
    check(path_values.check_code_paths, cfg)
    check(data.check_empty_paths, cfg)
    check(schema.check_choices, cfg)
    check(algorithm.check_algorithm, cfg)
    planning = world_size is not None
    check(trainer.check_loggers, cfg, check_installed=not planning)
    launch_size = world_size if planning else check(layout.world_size_from_env, cfg)
    place = check(lambda _: placement(cfg), launch_size)  # the actor's checks below see its own pool
    world_size = SKIPPED if place is SKIPPED else place.pool("train").size
    hf_config = check(lambda: read_hf_config(cfg.actor_rollout_ref.model.path))
    check(rollout.check_policy_model, cfg, hf_config)  # before its files: what the model is, then whether whole
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
    check(trainer.check_run_length_and_sampling, cfg)
    parallel = check(layout.check_model_parallel, cfg, world_size, hf_config)
    rollout_tp = check(rollout.check_rollout_tp, cfg, parallel, place)
    check(rollout.check_rollout_heads, cfg, rollout_tp, hf_config)
    world = check(layout.world_layout, parallel, rollout_tp, place)
    check(
        lambda world, place: batches.check_batches(cfg, world, rollout_dp=place.pool("rollout").size // rollout_tp),
        world,
        place,
    )
    lengths = check(data.check_lengths, cfg)
    sequence_length = SKIPPED if lengths is SKIPPED else sum(lengths)
    check(data.check_position_limit, sequence_length, hf_config)
    check(batches.check_dynamic_batching, cfg, sequence_length)
    critic_grad_clip = check(critic.check_critic, cfg, hf_config, world)
    check(model_shapes.check_critic_model, cfg.critic.model.path, sequence_length, hf_config)
    check(lambda: distillation.check_graph(cfg, graph.graph_roles(cfg)))
    check(distillation.check_teacher, cfg, hf_config, parallel, world_size, sequence_length, planning)
    grad_clip = check(actor.check_actor, cfg, hf_config)
    check(lora.check_lora, cfg, hf_config)
    check(lora.check_critic_lora, cfg, hf_config)
    check(reward.check_overlong_buffer, cfg, SKIPPED if lengths is SKIPPED else lengths[1])
    check(reward.check_overlong_manager, cfg)
    check(reward.check_async_reward, cfg)
    check(layout.check_rollout_pool_keys, cfg)
    check(transformer_config.check_transformer_overrides, cfg)
    check(transformer_config.check_model_fields, cfg, hf_config)
    check(rollout.check_greedy_groups, cfg)
    check(rollout.check_ignored_rollout_keys, cfg)
    check(rollout.check_router_replay, cfg, hf_config)
    check(fp8.check_fp8, cfg, hf_config, parallel, rollout_tp)
    check(reward.check_reward_name_without_path, cfg)
    for prefix in ("actor_rollout_ref.actor.optim", "critic.optim"):  # a floor above the peak is wrong under any
        check(optim.check_lr_floor, cfg, prefix)  # schedule: said before "has no effect"
    check(inert_keys.check_inert_keys, cfg, set(problems.keys))  # a key set while what reads it is off
    check(algorithm.check_filter_groups, cfg)
    check(async_training.check_async_training, cfg)
    from dagrl.agent.setup import check_multi_turn

    check(check_multi_turn, cfg)
    check(graph.check_graph_nodes, cfg, launch_size)
    from dagrl.dag.graph import preflight_graph  # user node functions' signatures, the pipeline factory's dry call

    step_graph = check(preflight_graph, cfg.dag)  # built once: the trainer runs this graph (RunShape.graph)
    check(trainer.check_launcher, cfg)
    check(profiler.check_global_profiler, cfg, launch_size)
    max_model_len = check(rollout.check_rollout_engine, cfg, sequence_length, check_installed=not planning)
    if planning and not any(os.path.exists(path) for path in as_list(cfg.data.train_files)):
        train_rows = None  # a layout needs the model's config, not the data: the plan says what it cannot count
    else:
        train_rows = check(data.check_data, cfg)
        check(profiler.check_profiled_steps, cfg, train_rows)
        check(async_training.check_oversample, cfg, train_rows)
        check(critic.check_critic_warmup, cfg, train_rows)
        check(optim.check_warmup_length, cfg, "actor_rollout_ref.actor.optim", "actor", train_rows)
        # inside check: reading the graph imports a custom pipeline function, whose failure is its own line
        check(
            lambda rows: (
                "critic" in graph.graph_roles(cfg) and optim.check_warmup_length(cfg, "critic.optim", "critic", rows)
            ),
            train_rows,
        )
        check(lambda _: reward.check_builtin_scorers(cfg), train_rows)
    check(checkpoints.check_checkpoint_dir, cfg)
    check(trainer.check_earlier_rows, cfg)
    check(checkpoints.check_output_dirs, cfg)
    check(actor.check_actor_checkpoint, cfg)
    if not problems.errors:  # the resume compares its checkpoint with this config: only with a config that passed
        from dagrl.trainer.checkpoint import check_resume

        check(lambda: check_resume(cfg, has_critic="critic" in graph.graph_roles(cfg)))
    problems.raise_if_any()
    if train_rows is not None:  # said of a config that passed: a refused one has its own lines
        trainer.say_steps_beyond_epochs(cfg, train_rows)
    algorithm.say_kl_twice(cfg)
    actor.say_clip_reversed(cfg)
    checkpoints.say_keep_all(cfg)

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
        graph=step_graph,
    )
    if place.is_colocated:
        return shape
    from dagrl.placement.bridge import global_rank  # this process's pool; a plan describes the training pool

    return shape.in_pool("train" if planning else place.pool_of(global_rank()).name)
