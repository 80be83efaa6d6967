"""The pre-flight rules of each config section (choices, batches, rollout engine, algorithm, critic, DAPO
filter, graph, data files, launcher; checkpoints in config/checkpoints.py, loggers in config/loggers.py,
asynchronous training and off-policy correction in config/async_checks.py); `validate.preflight`
runs them in order."""

from __future__ import annotations

import logging
import math
import os
from typing import Any

from dagrl.algo.catalog import ADV_ESTIMATORS
from dagrl.config import algorithm_checks
from dagrl.config.algorithm_checks import N_FIX, N_KEY, choice_error
from dagrl.config.checks import alias, as_config_error, as_list, divides, get, named, positive_int
from dagrl.config.errors import require
from dagrl.config.model_dir import read_hf_config
from dagrl.config.derived import needs_reference, skips_old_log_prob
from dagrl.dag.graph import RESHARD, RESHARD_FN
from dagrl.config.tree import Cfg
from dagrl.placement import WorldLayout
from dagrl.utils import precision

logger = logging.getLogger(__name__)


def check_run_length_and_sampling(cfg: Cfg) -> None:
    """The run-length and validation switches between keys (each key's own type and range are the schema's)."""
    trainer = cfg.trainer
    require(
        not trainer.val_only or cfg.data.val_files,
        "trainer.val_only",
        "trainer.val_only=true validates and exits, but data.val_files is null: set data.val_files",
    )
    require(
        not trainer.val_only or cfg.actor_rollout_ref.hybrid_engine,
        "trainer.val_only",
        "trainer.val_only=true is supported on colocated runs only: set actor_rollout_ref.hybrid_engine=true",
    )


def check_choices(cfg: Cfg) -> None:
    """Every key declared with choices (dagrl/config/schema/) holds one of them."""
    from dagrl.config.schema.root import keys

    for key, allowed in ((path, k.choices) for path, k in keys().items() if k.choices is not None):
        value = get(cfg, key)
        filed, name = named(cfg, key)
        require(value in allowed, filed, choice_error(name, repr(value), allowed))


def check_batches(cfg: Cfg, world: WorldLayout, rollout_dp: int | None = None) -> None:
    """Batch sizes against the actor's DP and the rollout's DP (`rollout_dp`: a separate pool's, else the world's)."""
    rollout_dp, actor_dp = rollout_dp or world.rollout_dp, world.dp
    n = positive_int(cfg, "actor_rollout_ref.rollout.n")
    train = positive_int(cfg, "data.train_batch_size")
    mini = positive_int(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size")
    micro = positive_int(cfg, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
    forward_only = {
        prefix: positive_int(cfg, f"{prefix}.log_prob_micro_batch_size_per_gpu")
        for prefix in ("actor_rollout_ref.rollout", "actor_rollout_ref.ref")
    }
    positive_int(cfg, "actor_rollout_ref.actor.ppo_epochs")
    positive_int(cfg, "actor_rollout_ref.rollout.val_kwargs.n")
    divides(train, rollout_dp, "data.train_batch_size", f"data.train_batch_size over {rollout_dp} rollout-DP ranks")
    divides(
        train,
        actor_dp,
        "data.train_batch_size",
        f"data.train_batch_size over {actor_dp} actor-DP ranks (GRPO groups stay whole on one rank)",
    )
    divides(
        train,
        mini,
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        "data.train_batch_size by actor_rollout_ref.actor.ppo_mini_batch_size",
    )
    divides(
        mini * n,
        actor_dp,
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        f"ppo_mini_batch_size x rollout.n over {actor_dp} actor-DP ranks",
    )
    divides(
        mini * n // actor_dp,
        micro,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
        "responses per mini-batch per rank by actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    )
    if not cfg.actor_rollout_ref.actor.use_dynamic_bsz:
        hint_forward_micro_batches(cfg, forward_only, micro)


def hint_forward_micro_batches(cfg: Cfg, forward_only: dict[str, int], train_micro: int) -> None:
    """A forward-only pass (old or reference log-probs) in smaller micro-batches than the update runs more of
    them, each paying the model's fixed per-forward cost (Megatron's layers are launch-bound on small models:
    SmolLM2 on one H100 spent more on 16 old-log-prob forwards than on 4 forward+backward updates). It keeps no
    activations for a backward, so it can take micro-batches at least as large."""
    for prefix, size in forward_only.items():
        used = needs_reference(cfg) if prefix.endswith(".ref") else not skips_old_log_prob(cfg)
        if used and size < train_micro and not get(cfg, f"{prefix}.log_prob_use_dynamic_bsz"):
            logger.warning(
                "%s.log_prob_micro_batch_size_per_gpu=%d is below actor.ppo_micro_batch_size_per_gpu=%d: "
                "the forward-only pass runs %.0fx as many micro-batches as the update; set it to %d or "
                "more (it keeps no activations for a backward)",
                prefix,
                size,
                train_micro,
                train_micro / size,
                train_micro,
            )


# verl's dynamic batch size: each switch and the token budgets it turns on.
DYNAMIC_BATCHING = (
    ("actor_rollout_ref.actor.use_dynamic_bsz", ("actor_rollout_ref.actor.ppo_max_token_len_per_gpu",)),
    (
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
        ("actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",),
    ),
    ("actor_rollout_ref.ref.log_prob_use_dynamic_bsz", ("actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",)),
    ("critic.use_dynamic_bsz", ("critic.ppo_max_token_len_per_gpu", "critic.forward_max_token_len_per_gpu")),
)


def check_dynamic_batching(cfg: Cfg, sequence_length: int) -> None:
    """Every token budget that is switched on holds at least one whole sequence (prompt + response)."""
    for switch, budgets in DYNAMIC_BATCHING:
        on = get(cfg, switch)
        for key in budgets:
            value = get(cfg, key)
            filed, name = named(cfg, key)
            require(
                not on or (isinstance(value, int) and not isinstance(value, bool) and value >= sequence_length),
                filed,
                f"{name}={value!r} must be an integer >= max_prompt_length + max_response_length = "
                f"{sequence_length} while {switch}=true (a micro-batch holds at least one whole sequence)",
            )


def check_remove_padding(cfg: Cfg) -> None:
    """The packing switches; context parallelism splits packed sequences, so it needs them on."""
    keys = ("actor_rollout_ref.model.use_remove_padding", "critic.model.use_remove_padding")
    cp = positive_int(cfg, "actor_rollout_ref.actor.megatron.context_parallel_size")
    for key in keys[:1] + (keys[1:] if "critic" in graph_roles(cfg) else ()):
        require(
            cp == 1 or get(cfg, key),
            key,
            f"actor_rollout_ref.actor.megatron.context_parallel_size={cp} splits packed sequences over GPUs: "
            f"set {key}=true (or context_parallel_size=1)",
        )
    dtype_key = "actor_rollout_ref.actor.megatron.param_dtype"
    # TransformerEngine's THD attention (cuDNN fused attention) has no fp32 kernel: measured on H200, TE 2.17.1.
    # CP > 1 runs on GPUs only (TE's THD attention), where `auto` is bf16
    require(
        cp == 1 or precision.resolve(get(cfg, dtype_key), precision.GPU) == "bfloat16",
        dtype_key,
        f"actor_rollout_ref.actor.megatron.context_parallel_size={cp} runs TransformerEngine's packed (THD) "
        f"attention, which has no fp32 kernel: set {dtype_key}=bfloat16 (or context_parallel_size=1)",
    )


def check_rollout_engine(cfg: Cfg, sequence_length: int, check_installed: bool = True) -> int:
    """The vLLM engine's sequence limit and install (checked on every run so a bad value fails before a GPU job is
    queued; the engine keys' types and ranges are the schema's)."""
    rollout = cfg.actor_rollout_ref.rollout
    max_model_len = rollout.max_model_len or sequence_length
    require(
        isinstance(max_model_len, int) and max_model_len >= sequence_length,
        "actor_rollout_ref.rollout.max_model_len",
        f"actor_rollout_ref.rollout.max_model_len={max_model_len} is shorter than max_prompt_length + "
        f"max_response_length = {sequence_length}: raise it or leave it null",
    )
    if rollout.name == "vllm" and check_installed:
        import importlib.util

        require(
            importlib.util.find_spec("vllm") is not None,
            "actor_rollout_ref.rollout.name",
            "actor_rollout_ref.rollout.name=vllm but vLLM is not installed: pip install 'dagrl[gpu]' "
            "(or use rollout.name=hf)",
        )
    return max_model_len


def check_algorithm(cfg: Cfg) -> None:
    """Advantage-estimator, policy-loss, loss-aggregation and KL-controller keys (the names themselves are in
    the schema's choices; what the estimator and the loss need is config/algorithm_checks.py's)."""
    algorithm = cfg.algorithm
    algorithm_checks.check_estimator(cfg, graph_roles)
    n = cfg.actor_rollout_ref.rollout.n
    require(
        not (isinstance(n, int) and n < 2) or algorithm.filter_groups.enable is not True,
        N_KEY,
        f"algorithm.filter_groups.enable=true keeps the groups whose metric varies, but {N_KEY}={n} makes every "
        f"group one response, which never varies: no group would ever be kept; {N_FIX}, or set "
        f"algorithm.filter_groups.enable=false",
    )
    algorithm_checks.check_loss_options(cfg)
    from dagrl.config.async_checks import check_off_policy  # truncated IS, decoupled PPO, sequence masking

    check_off_policy(cfg)
    kl = algorithm.kl_ctrl
    require(
        kl.type != "adaptive" or kl.target_kl > 0,
        "algorithm.kl_ctrl.target_kl",
        f"algorithm.kl_ctrl.target_kl={kl.target_kl} must be > 0 with kl_ctrl.type=adaptive",
    )


def graph_node_dicts(cfg: Cfg) -> Any:
    """The graph's node dicts: what dag.custom_pipeline_fn returns, else dag.nodes (a map by id or a list)."""
    from dagrl.dag.graph import node_list, pipeline_nodes

    dag = cfg.dag
    if dag.custom_pipeline_fn:
        return pipeline_nodes(dag.custom_pipeline_fn)
    return node_list(dag.nodes.to_dict() if isinstance(dag.nodes, Cfg) else dag.nodes)


def graph_roles(cfg: Cfg) -> set[str]:
    """The roles of the graph's nodes (dag.nodes, or what dag.custom_pipeline_fn returns)."""
    nodes = graph_node_dicts(cfg)
    if not isinstance(nodes, (list, tuple)):  # not a graph: dag.graph.preflight_graph says so, in one line
        return set()
    return {node.get("role") for node in nodes if isinstance(node, dict)}


def check_optim(cfg: Cfg, prefix: str) -> None:
    """An optimizer section (actor_rollout_ref.actor.optim, critic.optim): its keys' types and ranges are the
    schema's (dagrl/config/schema/optim.py); this is the rule between verl's schedule names and dagrl's."""
    check_verl_schedule(cfg, prefix)


def check_verl_schedule(cfg: Cfg, prefix: str) -> None:
    """verl's FSDP schedule keys (warmup_style, min_lr_ratio): each stands in for a dagrl key (lr_decay_style,
    min_lr) and must not contradict it when both are set."""
    style, decay = get(cfg, f"{prefix}.warmup_style"), get(cfg, f"{prefix}.lr_decay_style")
    require(
        style in (None, "constant", "cosine"),
        f"{prefix}.warmup_style",
        f"{prefix}.warmup_style={style!r} is not one of: constant, cosine (verl's values; for linear decay set "
        f"{prefix}.lr_decay_style=linear)",
    )
    require(
        style is None or decay in ("constant", style),
        f"{prefix}.warmup_style",
        f"{prefix}.warmup_style={style} conflicts with {prefix}.lr_decay_style={decay}: set only "
        f"{prefix}.lr_decay_style (dagrl's key), or give both the same value",
    )
    ratio, min_lr, lr = get(cfg, f"{prefix}.min_lr_ratio"), get(cfg, f"{prefix}.min_lr"), get(cfg, f"{prefix}.lr")
    require(
        ratio is None or min_lr == 0 or math.isclose(min_lr, ratio * lr),
        f"{prefix}.min_lr_ratio",
        f"{prefix}.min_lr_ratio={ratio} (min_lr {ratio * lr if ratio is not None else 0:g}) conflicts with "
        f"{prefix}.min_lr={min_lr}: set only {prefix}.min_lr (dagrl's key), or min_lr_ratio alone",
    )


def check_critic(cfg: Cfg, hf_config: dict, world: WorldLayout) -> float | None:
    """critic.* and trainer.critic_warmup, checked on every run (only PPO builds a critic, but a bad value should
    fail before a job is queued). Returns the critic's grad clip."""
    actor_dp = world.dp
    critic = cfg.critic
    n, train = cfg.actor_rollout_ref.rollout.n, cfg.data.train_batch_size
    mini = positive_int(cfg, "critic.ppo_mini_batch_size")
    micro = positive_int(cfg, "critic.ppo_micro_batch_size_per_gpu")
    positive_int(cfg, "critic.forward_micro_batch_size_per_gpu")
    positive_int(cfg, "critic.ppo_epochs")
    divides(train, mini, "critic.ppo_mini_batch_size", "data.train_batch_size by critic.ppo_mini_batch_size")
    divides(
        mini * n,
        actor_dp,
        "critic.ppo_mini_batch_size",
        f"critic.ppo_mini_batch_size x rollout.n over {actor_dp} actor-DP ranks",
    )
    divides(
        mini * n // actor_dp,
        micro,
        "critic.ppo_micro_batch_size_per_gpu",
        "responses per critic mini-batch per rank by critic.ppo_micro_batch_size_per_gpu",
    )
    # (the critic's keys' types and ranges, its grad clip's included, are the schema's: dagrl/config/schema/)
    grad_clip = alias(cfg, "critic.grad_clip", "critic.optim.clip_grad")
    check_optim(cfg, "critic.optim")
    if critic.model.path:
        critic_hf = read_hf_config(critic.model.path, key="critic.model.path")
        require(
            critic_hf.get("vocab_size") == hf_config.get("vocab_size"),
            "critic.model.path",
            f"critic.model.path has vocab_size {critic_hf.get('vocab_size')}, the actor's model "
            f"{hf_config.get('vocab_size')}: the critic reads the actor's token ids, so use a model with the "
            f"same tokenizer (or leave critic.model.path null)",
        )
        from types import SimpleNamespace
        from dagrl.engine.megatron.preflight import check_layout

        with as_config_error("critic.model.path"):  # the critic reuses the actor's parallel layout
            check_layout(SimpleNamespace(**critic_hf), world.model, world.world_size)
    warmup = cfg.trainer.critic_warmup
    has_critic = "critic" in graph_roles(cfg)
    require(
        warmup == 0 or has_critic,
        "trainer.critic_warmup",
        f"trainer.critic_warmup={warmup} holds the actor back while a critic warms up, but the graph has no "
        f"critic node (the actor would just not learn): set it to 0, or use dag=ppo",
    )
    estimator = ADV_ESTIMATORS.get(cfg.algorithm.adv_estimator)
    readers = [e.name for e in ADV_ESTIMATORS if "values" in e.needs]
    require(
        not has_critic or estimator is None or "values" in estimator.needs,
        "algorithm.adv_estimator",
        f"the graph has a critic node but algorithm.adv_estimator={cfg.algorithm.adv_estimator} never uses its "
        f"values: set algorithm.adv_estimator={' or '.join(readers)} (or use a graph without a critic)",
    )
    return grad_clip


def check_filter_groups(cfg: Cfg) -> None:
    """DAPO dynamic sampling: a filter metric that exists when the filter runs."""
    options = cfg.algorithm.filter_groups
    require(
        not (options.enable and options.metric == "seq_final_reward" and cfg.algorithm.use_kl_in_reward),
        "algorithm.filter_groups.metric",
        "algorithm.filter_groups.metric=seq_final_reward with algorithm.use_kl_in_reward=true: the KL penalty is "
        "applied after the reference log-probs, long after dynamic sampling; filter on seq_reward instead",
    )


def check_graph_nodes(cfg: Cfg, world_size: int) -> None:
    """What the node dicts (dag.nodes, or what dag.custom_pipeline_fn returns) show without importing their
    functions (dag.graph.preflight_graph checks the graph itself)."""
    custom = cfg.dag.custom_pipeline_fn
    source = "dag.custom_pipeline_fn" if custom else "dag.nodes"
    nodes = graph_node_dicts(cfg)
    if not isinstance(nodes, (list, tuple)):  # preflight_graph names it
        return
    nodes = [node for node in nodes if hasattr(node, "get")]  # else: preflight_graph names it
    ids = [node.get("id") for node in nodes]
    twice = next((i for i in ids if ids.count(i) > 1), None)
    require(
        twice is None or custom,
        "dag.nodes",  # (a pipeline's own duplicate: build_graph's line names it)
        f"dag.nodes: node id {twice!r} appears twice "
        f"(nodes {', '.join(str(n) for n, i in enumerate(ids) if i == twice)})"
        f": give each node its own id (deps name nodes by id)",
    )
    fns = [str(node.get("fn", "")) for node in nodes]
    roles = [node.get("role") for node in nodes]
    require(
        world_size == 1 or RESHARD in roles,
        source,
        f"{world_size} processes but the graph{f' {custom} returns' if custom else ''} has no node with role "
        f"{RESHARD} ({RESHARD_FN}): add it after scoring (as conf/dag/grpo.yaml does) so that batches reach the "
        f"actor layout",
    )
    require(
        not cfg.algorithm.filter_groups.enable or any(fn.startswith("dagrl.nodes.dynamic_sampling:") for fn in fns),
        "algorithm.filter_groups.enable",
        "algorithm.filter_groups.enable=true but the graph has no dynamic_sampling node: use dag=dapo",
    )


def check_paths(cfg: Cfg) -> int:
    """The data files (footers), the custom reward function, and that every row can be scored (the data_source
    and reward_model columns only are read: a run whose rows all score 0 would train nothing)."""
    from dagrl.data.checks import check_data_files, check_reward_inputs

    train_files = cfg.data.train_files
    require(bool(train_files), "data.train_files", "data.train_files is not set: point it at a parquet file")
    with as_config_error("data.train_files"):
        rows = check_data_files(as_list(train_files), cfg.data.prompt_key)
    if cfg.data.val_files:
        with as_config_error("data.val_files"):
            check_data_files(as_list(cfg.data.val_files), cfg.data.prompt_key)
    custom = cfg.custom_reward_function
    require(
        not (custom.path and os.path.isdir(os.path.expanduser(custom.path))),
        "custom_reward_function.path",
        f"custom_reward_function.path={custom.path} is a directory: point it at the .py file that defines "
        f"{custom.name or 'compute_score'} (e.g. {str(custom.path).rstrip('/')}/reward.py)",
    )
    if custom.path:
        from dagrl.reward.custom import load_custom_reward_fn

        with as_config_error("custom_reward_function.path"):
            load_custom_reward_fn(custom.path, custom.name, custom.reward_kwargs.to_dict())
        known = None  # the user's function decides what it scores
    else:
        from dagrl.reward.scorers import SCORER_BY_DATA_SOURCE

        known = tuple(SCORER_BY_DATA_SOURCE)
    with as_config_error("data.train_files"):
        check_reward_inputs(as_list(train_files), known)
    if cfg.data.val_files:
        with as_config_error("data.val_files"):
            check_reward_inputs(as_list(cfg.data.val_files), known)
    return rows


def check_launcher(cfg: Cfg) -> None:
    trainer = cfg.trainer
    address = trainer.ray_address
    require(
        address is None or (isinstance(address, str) and address),
        "trainer.ray_address",
        f'trainer.ray_address={address!r} must be null, "auto" or host:port of a Ray head',
    )
    require(
        address is None or trainer.launcher == "ray",
        "trainer.ray_address",
        f"trainer.ray_address is set but trainer.launcher={trainer.launcher}: set trainer.launcher=ray",
    )
    require(
        trainer.max_restarts == 0 or trainer.launcher == "ray",
        "trainer.max_restarts",
        f"trainer.max_restarts={trainer.max_restarts} restarts Ray workers (trainer.launcher=ray); under torchrun "
        f"use torchrun --max-restarts={trainer.max_restarts} and leave trainer.max_restarts=0",
    )
    if trainer.launcher == "ray":
        import importlib.util

        require(
            importlib.util.find_spec("ray") is not None,
            "trainer.launcher",
            "trainer.launcher=ray but Ray is not installed: pip install ray (or use trainer.launcher=local "
            "with torchrun)",
        )
        require(
            "WORLD_SIZE" not in os.environ or os.environ.get("DAGRL_LAUNCHER") == "ray",
            "trainer.launcher",
            "trainer.launcher=ray starts its own workers: run python3 -m dagrl.main_dag once, not under torchrun",
        )
