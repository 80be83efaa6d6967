"""Pre-flight: every rule that can be checked before a model is built, in one place.

Used by the trainer and by `python3 -m dagrl.plan`. Imports neither megatron nor vllm, so a bad config fails in
about a second with one line (exit code 2) naming the key or file and the fix.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from dagrl.config.errors import ConfigError
from dagrl.config.tree import Cfg

logger = logging.getLogger(__name__)

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral", "qwen3_moe")
CHOICES = {
    "actor_rollout_ref.actor.strategy": ("megatron",),
    "actor_rollout_ref.rollout.name": ("hf", "vllm"),
    "actor_rollout_ref.actor.loss_agg_mode": ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                              "seq-mean-token-sum-norm"),
    "actor_rollout_ref.actor.policy_loss.loss_mode": ("vanilla", "gspo", "cispo"),
    "actor_rollout_ref.actor.kl_loss_type": ("k1", "k2", "k3", "low_var_kl", "abs", "mse", "kl"),
    "actor_rollout_ref.actor.optim.lr_decay_style": ("constant", "linear", "cosine"),
    "actor_rollout_ref.actor.megatron.param_dtype": ("float32", "fp32", "bfloat16", "bf16"),
    "actor_rollout_ref.rollout.dtype": ("float32", "fp32", "bfloat16", "bf16"),
    "actor_rollout_ref.rollout.load_format": ("dummy", "auto", "safetensors"),
    "algorithm.adv_estimator": ("grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "gae"),
    "algorithm.kl_penalty": ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"),
    "algorithm.kl_ctrl.type": ("fixed", "adaptive"),
    "data.truncation": ("error", "left", "right", "middle"),
    "reward_model.reward_manager": ("naive", "dapo"),
    "reward_model.on_error": ("zero", "raise"),
    "trainer.resume_mode": ("auto", "disable", "resume_path"),
    "trainer.launcher": ("local", "ray"),
    "algorithm.filter_groups.metric": ("acc", "score", "seq_reward", "seq_final_reward"),
    "algorithm.filter_groups.on_limit": ("raise", "smaller_batch"),
}
CHOICES.update({  # the critic's keys accept what the actor's do
    "critic.strategy": CHOICES["actor_rollout_ref.actor.strategy"],
    "critic.loss_agg_mode": CHOICES["actor_rollout_ref.actor.loss_agg_mode"],
    "critic.optim.lr_decay_style": CHOICES["actor_rollout_ref.actor.optim.lr_decay_style"],
})
LOGGERS = ("console", "tensorboard", "jsonl")


@dataclass(frozen=True)
class RunShape:
    """Quantities derived once from the config and the environment."""
    world_size: int
    rollout_tp: int
    rollout_dp: int
    actor_dp: int
    prompt_length: int
    response_length: int
    grad_clip: float
    train_rows: int
    hf_config: dict
    max_model_len: int = 0  # the rollout's longest sequence (vLLM's max_model_len)
    critic_grad_clip: float | None = None  # critic.grad_clip (or its alias critic.optim.clip_grad)


def _get(cfg: Cfg, dotted: str):
    node = cfg
    for part in dotted.split("."):
        node = node[part]
    return node


def _require(condition: bool, key: str, message: str) -> None:
    if not condition:
        raise ConfigError(key, message)


def _alias(cfg: Cfg, canonical: str, alias: str):
    value, alias_value = _get(cfg, canonical), _get(cfg, alias)
    _require(alias_value is None or alias_value == value, alias,
             f"{alias}={alias_value} conflicts with {canonical}={value}: set only {canonical} (the canonical key), "
             f"or give both the same value")
    return value


def _positive_int(cfg: Cfg, dotted: str) -> int:
    value = _get(cfg, dotted)
    _require(isinstance(value, int) and not isinstance(value, bool) and value > 0, dotted,
             f"{dotted}={value!r} must be a positive integer")
    return value


def _divides(numerator: int, denominator: int, key: str, what: str) -> None:
    _require(denominator > 0 and numerator % denominator == 0, key, f"{what}: {numerator} is not divisible by "
             f"{denominator}; change {key}")


def world_size_from_env(cfg: Cfg) -> int:
    expected = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    actual = int(os.environ.get("WORLD_SIZE", "1"))
    _require(expected == actual, "trainer.n_gpus_per_node",
             f"trainer.nnodes x trainer.n_gpus_per_node = {expected} but this launch has {actual} process(es): "
             f"start one process per slot (torchrun --nproc-per-node {cfg.trainer.n_gpus_per_node}) or set "
             f"trainer.n_gpus_per_node={actual}")
    return actual


def planned_world_size(cfg: Cfg) -> int:
    """trainer.nnodes x trainer.n_gpus_per_node: the world a launch of this config will have (dagrl.plan)."""
    return _positive_int(cfg, "trainer.nnodes") * _positive_int(cfg, "trainer.n_gpus_per_node")


def read_hf_config(model_path: str | None, key: str = "actor_rollout_ref.model.path") -> dict:
    """The config.json of the HF model directory that config key `key` names."""
    _require(bool(model_path), key, f"{key} is not set: point it at a local HF model directory")
    path = Path(os.path.expanduser(model_path))
    _require(path.is_dir(), key, f"model directory {path} does not exist: fix {key}")
    config_file = path / "config.json"
    _require(config_file.is_file(), key, f"{config_file} is missing: {key} must be an HF model directory")
    try:
        hf_config = json.loads(config_file.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(key, f"{config_file} is not valid JSON ({err}): fix or re-download the model that {key} "
                               f"names") from None
    model_type = hf_config.get("model_type")
    _require(model_type in SUPPORTED_MODEL_TYPES, key,
             f"model type {model_type!r} in {config_file} is not supported; supported: "
             f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    return hf_config


def check_tokenizer_files(model_path: str) -> None:
    """The tokenizer and chat template the prompts need, from the files alone (transformers is not imported)."""
    key = "actor_rollout_ref.model.path"
    path = Path(os.path.expanduser(model_path))
    tokenizer_config = path / "tokenizer_config.json"
    _require(any((path / name).is_file() for name in ("tokenizer.json", "tokenizer.model", "vocab.json")), key,
             f"{path} has no tokenizer (tokenizer.json, tokenizer.model or vocab.json): copy the model's tokenizer "
             f"files into the directory {key} names")
    try:
        settings = json.loads(tokenizer_config.read_text()) if tokenizer_config.is_file() else {}
    except json.JSONDecodeError as err:
        raise ConfigError(key, f"{tokenizer_config} is not valid JSON ({err}): fix or re-download it") from None
    _require(bool(settings.get("chat_template")) or (path / "chat_template.jinja").is_file()
             or (path / "chat_template.json").is_file(), key,
             f"the tokenizer in {path} has no chat template (none in tokenizer_config.json, no chat_template.jinja) "
             f"and prompts are chat lists: point {key} at an instruct/chat model, or add its template there")


def _check_run_length_and_sampling(cfg: Cfg) -> None:
    _positive_int(cfg, "trainer.total_epochs")
    steps = cfg.trainer.total_training_steps
    _require(steps is None or (isinstance(steps, int) and not isinstance(steps, bool) and steps > 0),
             "trainer.total_training_steps",
             f"trainer.total_training_steps={steps!r} must be null (total_epochs decides) or a positive integer")
    temperature = cfg.actor_rollout_ref.rollout.temperature
    _require(isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature > 0,
             "actor_rollout_ref.rollout.temperature",
             f"actor_rollout_ref.rollout.temperature={temperature!r} must be > 0 (log-probs are divided by it; "
             f"for greedy validation set actor_rollout_ref.rollout.val_kwargs.do_sample=false)")


def _check_choices(cfg: Cfg) -> None:
    for key, allowed in CHOICES.items():
        value = _get(cfg, key)
        _require(value in allowed, key, f"{key}={value!r} is not one of: {', '.join(map(str, allowed))}")
    loggers = cfg.trainer.logger
    loggers = [loggers] if isinstance(loggers, str) else list(loggers)
    for name in loggers:
        _require(name in LOGGERS, "trainer.logger", f"trainer.logger has {name!r}; valid: {', '.join(LOGGERS)}")


def _check_batches(cfg: Cfg, rollout_dp: int, actor_dp: int) -> None:
    n = _positive_int(cfg, "actor_rollout_ref.rollout.n")
    train = _positive_int(cfg, "data.train_batch_size")
    mini = _positive_int(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size")
    micro = _positive_int(cfg, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
    _positive_int(cfg, "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu")
    _positive_int(cfg, "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu")
    _positive_int(cfg, "actor_rollout_ref.actor.ppo_epochs")
    _positive_int(cfg, "actor_rollout_ref.rollout.val_kwargs.n")
    _divides(train, rollout_dp, "data.train_batch_size", f"data.train_batch_size over {rollout_dp} rollout-DP ranks")
    _divides(train, actor_dp, "data.train_batch_size",
             f"data.train_batch_size over {actor_dp} actor-DP ranks (GRPO groups stay whole on one rank)")
    _divides(train, mini, "actor_rollout_ref.actor.ppo_mini_batch_size",
             "data.train_batch_size by actor_rollout_ref.actor.ppo_mini_batch_size")
    _divides(mini * n, actor_dp, "actor_rollout_ref.actor.ppo_mini_batch_size",
             f"ppo_mini_batch_size x rollout.n over {actor_dp} actor-DP ranks")
    _divides(mini * n // actor_dp, micro, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
             "responses per mini-batch per rank by actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")


def _check_rollout_engine(cfg: Cfg, sequence_length: int, check_installed: bool = True) -> int:
    """The vLLM engine keys (checked on every run so a typo'd value fails before a GPU job is queued)."""
    rollout = cfg.actor_rollout_ref.rollout
    for key in ("max_num_batched_tokens", "max_num_seqs"):
        _positive_int(cfg, f"actor_rollout_ref.rollout.{key}")
    for key in ("enforce_eager", "free_cache_engine", "enable_chunked_prefill", "enable_prefix_caching",
                "calculate_log_probs"):
        _require(isinstance(rollout[key], bool), f"actor_rollout_ref.rollout.{key}",
                 f"actor_rollout_ref.rollout.{key}={rollout[key]!r} must be true or false")
    utilization = rollout.gpu_memory_utilization
    _require(isinstance(utilization, (int, float)) and 0 < utilization < 1,
             "actor_rollout_ref.rollout.gpu_memory_utilization",
             f"actor_rollout_ref.rollout.gpu_memory_utilization={utilization!r} must be a fraction in (0, 1)")
    _require(isinstance(rollout.engine_kwargs.vllm.to_dict(), dict), "actor_rollout_ref.rollout.engine_kwargs.vllm",
             "actor_rollout_ref.rollout.engine_kwargs.vllm must be a map of vLLM engine arguments")
    max_model_len = rollout.max_model_len or sequence_length
    _require(isinstance(max_model_len, int) and max_model_len >= sequence_length,
             "actor_rollout_ref.rollout.max_model_len",
             f"actor_rollout_ref.rollout.max_model_len={max_model_len} is shorter than max_prompt_length + "
             f"max_response_length = {sequence_length}: raise it or leave it null")
    if rollout.name == "vllm" and check_installed:
        import importlib.util
        _require(importlib.util.find_spec("vllm") is not None, "actor_rollout_ref.rollout.name",
                 "actor_rollout_ref.rollout.name=vllm but vLLM is not installed: pip install 'dagrl[gpu]' "
                 "(or use rollout.name=hf)")
    return max_model_len


def _check_algorithm(cfg: Cfg) -> None:
    """Advantage-estimator, loss-aggregation and KL-controller keys (the names themselves are in CHOICES)."""
    algorithm = cfg.algorithm
    for key in ("gamma", "lam"):
        value = algorithm[key]
        _require(isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1,
                 f"algorithm.{key}", f"algorithm.{key}={value!r} must be a number in [0, 1]")
    if algorithm.adv_estimator == "gae":
        _require("critic" in graph_roles(cfg), "algorithm.adv_estimator",
                 "algorithm.adv_estimator=gae needs the critic's values, but the graph has no node with role critic: "
                 "use the PPO graph (dag=ppo) or add a critic node, or pick an estimator without a critic "
                 "(grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline)")
    scale = cfg.actor_rollout_ref.actor.loss_scale_factor
    _require(scale is None or (isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale > 0),
             "actor_rollout_ref.actor.loss_scale_factor",
             f"actor_rollout_ref.actor.loss_scale_factor={scale!r} must be null or a positive number")
    cap = cfg.actor_rollout_ref.actor.tis_imp_ratio_cap
    _require(isinstance(cap, (int, float)) and not isinstance(cap, bool) and (cap <= 0 or cap >= 1),
             "actor_rollout_ref.actor.tis_imp_ratio_cap",
             f"actor_rollout_ref.actor.tis_imp_ratio_cap={cap!r} must be -1 (off) or a cap >= 1, e.g. 2")
    _require(cap <= 0 or cfg.actor_rollout_ref.rollout.calculate_log_probs, "actor_rollout_ref.actor.tis_imp_ratio_cap",
             "actor_rollout_ref.actor.tis_imp_ratio_cap needs the rollout's log-probs: set "
             "actor_rollout_ref.rollout.calculate_log_probs=true")
    kl = algorithm.kl_ctrl
    _require(kl.kl_coef >= 0, "algorithm.kl_ctrl.kl_coef", f"algorithm.kl_ctrl.kl_coef={kl.kl_coef} must be >= 0")
    if kl.type == "adaptive":
        _require(kl.target_kl > 0, "algorithm.kl_ctrl.target_kl",
                 f"algorithm.kl_ctrl.target_kl={kl.target_kl} must be > 0 with kl_ctrl.type=adaptive")
        _require(kl.horizon > 0, "algorithm.kl_ctrl.horizon",
                 f"algorithm.kl_ctrl.horizon={kl.horizon} must be > 0 with kl_ctrl.type=adaptive")


def graph_roles(cfg: Cfg) -> set[str]:
    """The roles of the graph's nodes (dag.nodes, or what dag.custom_pipeline_fn returns)."""
    from dagrl.dag.graph import import_function
    dag = cfg.dag
    nodes = import_function(dag.custom_pipeline_fn, "dag.custom_pipeline_fn")() if dag.custom_pipeline_fn \
        else dag.nodes
    return {node.get("role") for node in nodes if isinstance(node, dict)}


def _non_negative(cfg: Cfg, dotted: str, upper: float | None = None) -> float:
    value = _get(cfg, dotted)
    _require(isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
             and (upper is None or value <= upper), dotted,
             f"{dotted}={value!r} must be a number >= 0" + (f" and <= {upper}" if upper is not None else ""))
    return value


def _check_optim(cfg: Cfg, prefix: str) -> None:
    """An optimizer section (actor_rollout_ref.actor.optim, critic.optim); lr_decay_style is in CHOICES."""
    _non_negative(cfg, f"{prefix}.lr")
    _non_negative(cfg, f"{prefix}.weight_decay")
    _non_negative(cfg, f"{prefix}.min_lr")
    _non_negative(cfg, f"{prefix}.lr_warmup_steps_ratio", upper=1.0)
    warmup = _get(cfg, f"{prefix}.lr_warmup_steps")
    _require(warmup is None or (isinstance(warmup, int) and not isinstance(warmup, bool)), f"{prefix}.lr_warmup_steps",
             f"{prefix}.lr_warmup_steps={warmup!r} must be an integer (< 0: use lr_warmup_steps_ratio)")
    betas = _get(cfg, f"{prefix}.betas")
    _require(len(betas) == 2 and all(isinstance(b, (int, float)) and 0 <= b < 1 for b in betas), f"{prefix}.betas",
             f"{prefix}.betas={list(betas)!r} must be two numbers in [0, 1)")


def _check_critic(cfg: Cfg, hf_config: dict, actor_dp: int, world_size: int) -> float | None:
    """critic.* and trainer.critic_warmup, checked on every run (only PPO builds a critic, but a bad value should
    fail before a job is queued). Returns the critic's grad clip."""
    critic = cfg.critic
    n, train = cfg.actor_rollout_ref.rollout.n, cfg.data.train_batch_size
    mini = _positive_int(cfg, "critic.ppo_mini_batch_size")
    micro = _positive_int(cfg, "critic.ppo_micro_batch_size_per_gpu")
    _positive_int(cfg, "critic.forward_micro_batch_size_per_gpu")
    _positive_int(cfg, "critic.ppo_epochs")
    _divides(train, mini, "critic.ppo_mini_batch_size", "data.train_batch_size by critic.ppo_mini_batch_size")
    _divides(mini * n, actor_dp, "critic.ppo_mini_batch_size", f"critic.ppo_mini_batch_size x rollout.n over "
             f"{actor_dp} actor-DP ranks")
    _divides(mini * n // actor_dp, micro, "critic.ppo_micro_batch_size_per_gpu",
             "responses per critic mini-batch per rank by critic.ppo_micro_batch_size_per_gpu")
    for key in ("shuffle", "model.enable_gradient_checkpointing", "megatron.param_offload", "megatron.grad_offload",
                "megatron.optimizer_offload"):
        value = _get(cfg, f"critic.{key}")
        _require(isinstance(value, bool), f"critic.{key}", f"critic.{key}={value!r} must be true or false")
    _require(isinstance(critic.megatron.seed, int), "critic.megatron.seed",
             f"critic.megatron.seed={critic.megatron.seed!r} must be an integer")
    _require(_non_negative(cfg, "critic.cliprange_value") > 0, "critic.cliprange_value",
             "critic.cliprange_value must be > 0")
    grad_clip = _alias(cfg, "critic.grad_clip", "critic.optim.clip_grad")
    _require(grad_clip is None or grad_clip > 0, "critic.grad_clip", f"critic.grad_clip={grad_clip} must be positive")
    _check_optim(cfg, "critic.optim")
    if critic.model.path:
        critic_hf = read_hf_config(critic.model.path, key="critic.model.path")
        _require(critic_hf.get("vocab_size") == hf_config.get("vocab_size"), "critic.model.path",
                 f"critic.model.path has vocab_size {critic_hf.get('vocab_size')}, the actor's model "
                 f"{hf_config.get('vocab_size')}: the critic reads the actor's token ids, so use a model with the "
                 f"same tokenizer (or leave critic.model.path null)")
        from types import SimpleNamespace
        from dagrl.engine.megatron.preflight import check_layout
        with _as_config_error("critic.model.path"):  # the critic reuses the actor's parallel layout
            check_layout(SimpleNamespace(**critic_hf), layout_from_config(cfg.actor_rollout_ref.actor.megatron),
                         world_size)
    warmup = cfg.trainer.critic_warmup
    _require(isinstance(warmup, int) and not isinstance(warmup, bool) and warmup >= 0, "trainer.critic_warmup",
             f"trainer.critic_warmup={warmup!r} must be an integer >= 0")
    has_critic = "critic" in graph_roles(cfg)
    _require(warmup == 0 or has_critic, "trainer.critic_warmup",
             f"trainer.critic_warmup={warmup} holds the actor back while a critic warms up, but the graph has no "
             f"critic node (the actor would just not learn): set it to 0, or use dag=ppo")
    _require(not has_critic or cfg.algorithm.adv_estimator == "gae", "algorithm.adv_estimator",
             f"the graph has a critic node but algorithm.adv_estimator={cfg.algorithm.adv_estimator} never uses its "
             f"values: set algorithm.adv_estimator=gae (or use a graph without a critic)")
    return grad_clip


def _check_filter_groups(cfg: Cfg) -> None:
    """DAPO dynamic sampling keys, and the batch layout switch."""
    options = cfg.algorithm.filter_groups
    for key, value in (("algorithm.filter_groups.enable", options.enable),
                       ("trainer.balance_batch", cfg.trainer.balance_batch)):
        _require(isinstance(value, bool), key, f"{key}={value!r} must be true or false")
    limit = options.max_num_gen_batches
    _require(isinstance(limit, int) and not isinstance(limit, bool), "algorithm.filter_groups.max_num_gen_batches",
             f"algorithm.filter_groups.max_num_gen_batches={limit!r} must be an integer (<= 0: no limit)")
    _require(not (options.enable and options.metric == "seq_final_reward" and cfg.algorithm.use_kl_in_reward),
             "algorithm.filter_groups.metric",
             "algorithm.filter_groups.metric=seq_final_reward with algorithm.use_kl_in_reward=true: the KL penalty is "
             "applied after the reference log-probs, long after dynamic sampling; filter on seq_reward instead")


def _check_graph_nodes(cfg: Cfg, world_size: int) -> None:
    """What dag.nodes shows without importing them (the trainer checks a custom_pipeline_fn's graph when built)."""
    if cfg.dag.custom_pipeline_fn:
        return
    fns = [str(node.get("fn", "")) for node in cfg.dag.nodes]
    _require(world_size == 1 or "dagrl.nodes.layout:to_actor_layout" in fns, "dag.nodes",
             f"{world_size} processes but the graph has no node with fn dagrl.nodes.layout:to_actor_layout: add it "
             f"after scoring (as conf/dag/grpo.yaml does) so that batches reach the actor layout")
    _require(not cfg.algorithm.filter_groups.enable or any(fn.startswith("dagrl.nodes.dynamic_sampling:")
                                                           for fn in fns), "algorithm.filter_groups.enable",
             "algorithm.filter_groups.enable=true but the graph has no dynamic_sampling node: use dag=dapo")


def _check_paths(cfg: Cfg) -> int:
    from dagrl.data.dataset import check_data_files

    train_files = cfg.data.train_files
    _require(bool(train_files), "data.train_files", "data.train_files is not set: point it at a parquet file")
    with _as_config_error("data.train_files"):
        rows = check_data_files(_as_list(train_files), cfg.data.prompt_key)
    if cfg.data.val_files:
        with _as_config_error("data.val_files"):
            check_data_files(_as_list(cfg.data.val_files), cfg.data.prompt_key)
    if cfg.custom_reward_function.path:
        from dagrl.reward.custom import load_custom_reward_fn
        with _as_config_error("custom_reward_function.path"):
            load_custom_reward_fn(cfg.custom_reward_function.path, cfg.custom_reward_function.name)
    return rows


def _check_launcher(cfg: Cfg) -> None:
    trainer = cfg.trainer
    address = trainer.ray_address
    _require(address is None or (isinstance(address, str) and address), "trainer.ray_address",
             f"trainer.ray_address={address!r} must be null, \"auto\" or host:port of a Ray head")
    _require(address is None or trainer.launcher == "ray", "trainer.ray_address",
             f"trainer.ray_address is set but trainer.launcher={trainer.launcher}: set trainer.launcher=ray")
    if trainer.launcher == "ray":
        import importlib.util
        _require(importlib.util.find_spec("ray") is not None, "trainer.launcher",
                 "trainer.launcher=ray but Ray is not installed: pip install ray (or use trainer.launcher=local "
                 "with torchrun)")
        _require("WORLD_SIZE" not in os.environ or os.environ.get("DAGRL_LAUNCHER") == "ray", "trainer.launcher",
                 "trainer.launcher=ray starts its own workers: run python3 -m dagrl.main_dag once, not under torchrun")


def _check_checkpoint_dir(cfg: Cfg) -> None:
    root = Path(os.path.expanduser(cfg.trainer.default_local_dir))
    existing = next((p for p in [root, *root.parents] if p.exists()), None)
    _require(existing is None or existing.is_dir(), "trainer.default_local_dir",
             f"checkpoint directory {root} cannot be created: {existing} is not a directory; fix "
             f"trainer.default_local_dir")
    _require(existing is not None and os.access(existing, os.W_OK), "trainer.default_local_dir",
             f"checkpoint directory {root} is not writable (nearest existing parent: {existing}): "
             f"fix trainer.default_local_dir")
    from dagrl.trainer.checkpoint import check_resume_path, complete_checkpoints
    if cfg.trainer.resume_mode == "resume_path":
        check_resume_path(cfg.trainer.resume_from_path)
    else:
        _require(cfg.trainer.resume_from_path is None, "trainer.resume_from_path",
                 f"trainer.resume_from_path is set but trainer.resume_mode={cfg.trainer.resume_mode}: "
                 f"set trainer.resume_mode=resume_path to use it, or drop resume_from_path")
    if cfg.trainer.resume_mode == "disable":
        found = complete_checkpoints(root)
        _require(not found, "trainer.resume_mode",
                 f"trainer.resume_mode=disable but {root} already holds checkpoints (newest: {found[-1][1].name if found else ''}) "
                 f"that a new run would overwrite: use resume_mode=auto or a new trainer.default_local_dir")


@contextlib.contextmanager
def _as_config_error(key: str):
    """Checks of other modules raise ValueError with a complete one-line message; re-raise it as ConfigError."""
    try:
        yield
    except ConfigError:
        raise
    except ValueError as err:
        raise ConfigError(key, str(err)) from err


def _as_list(value) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def preflight(cfg: Cfg, world_size: int | None = None) -> RunShape:
    """Validate everything checkable before models are built; raise ConfigError on the first problem.

    `world_size` given: planning a launch from elsewhere (python3 -m dagrl.plan), so the checks of this process's
    own environment (its WORLD_SIZE, vLLM installed) are skipped."""
    _check_choices(cfg)
    _check_algorithm(cfg)
    planning = world_size is not None
    world_size = world_size if planning else world_size_from_env(cfg)
    hf_config = read_hf_config(cfg.actor_rollout_ref.model.path)
    if not planning:  # a plan needs only config.json (the model may not be on the planning machine)
        check_tokenizer_files(cfg.actor_rollout_ref.model.path)
    _check_run_length_and_sampling(cfg)
    megatron = cfg.actor_rollout_ref.actor.megatron
    layout_tp = _positive_int(cfg, "actor_rollout_ref.actor.megatron.tensor_model_parallel_size")
    layout_pp = _positive_int(cfg, "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size")
    layout_cp = _positive_int(cfg, "actor_rollout_ref.actor.megatron.context_parallel_size")
    model_parallel = layout_tp * layout_pp * layout_cp
    _divides(world_size, model_parallel, "actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
             "world size by TP x PP x CP")
    from types import SimpleNamespace
    from dagrl.engine.megatron.preflight import check_layout
    with _as_config_error("actor_rollout_ref.actor.megatron"):
        check_layout(SimpleNamespace(_name_or_path=cfg.actor_rollout_ref.model.path, **hf_config),
                     layout_from_config(megatron), world_size)
    actor_dp = world_size // model_parallel

    rollout = cfg.actor_rollout_ref.rollout
    rollout_tp = rollout.tensor_model_parallel_size or layout_tp
    _require(rollout.name != "hf" or rollout_tp == 1, "actor_rollout_ref.rollout.tensor_model_parallel_size",
             f"the hf rollout runs one full model per rank: set actor_rollout_ref.rollout.tensor_model_parallel_size=1 "
             f"(now {rollout_tp}) or use rollout.name=vllm")
    _divides(world_size, rollout_tp, "actor_rollout_ref.rollout.tensor_model_parallel_size", "world size by rollout TP")
    rollout_dp = world_size // rollout_tp
    _check_batches(cfg, rollout_dp, actor_dp)

    prompt_length = _alias(cfg, "data.max_prompt_length", "actor_rollout_ref.rollout.prompt_length")
    response_length = _alias(cfg, "data.max_response_length", "actor_rollout_ref.rollout.response_length")
    _positive_int(cfg, "data.max_prompt_length")
    _positive_int(cfg, "data.max_response_length")
    grad_clip = _alias(cfg, "actor_rollout_ref.actor.grad_clip", "actor_rollout_ref.actor.optim.clip_grad")
    _check_optim(cfg, "actor_rollout_ref.actor.optim")
    critic_grad_clip = _check_critic(cfg, hf_config, actor_dp, world_size)
    _require(grad_clip is None or grad_clip > 0, "actor_rollout_ref.actor.grad_clip",
             f"actor_rollout_ref.actor.grad_clip={grad_clip} must be positive")
    actor = cfg.actor_rollout_ref.actor
    _require(actor.clip_ratio_c > 1.0, "actor_rollout_ref.actor.clip_ratio_c",
             f"actor_rollout_ref.actor.clip_ratio_c={actor.clip_ratio_c} must be > 1 (dual clip)")
    top = cfg.actor_rollout_ref.model.trainable_top_layers
    layers = hf_config.get("num_hidden_layers", 0)
    _require(top is None or (isinstance(top, int) and 0 < top <= layers), "actor_rollout_ref.model.trainable_top_layers",
             f"actor_rollout_ref.model.trainable_top_layers={top} must be null or in 1..{layers}")
    _require(top is None or not megatron.use_distributed_optimizer, "actor_rollout_ref.model.trainable_top_layers",
             "actor_rollout_ref.model.trainable_top_layers is not supported with "
             "actor_rollout_ref.actor.megatron.use_distributed_optimizer=true yet: set one of them off")
    buffer = cfg.reward_model.overlong_buffer
    _require(not buffer.enable or 0 < buffer.len < response_length, "reward_model.overlong_buffer.len",
             f"reward_model.overlong_buffer.len={buffer.len} must be in 1..{response_length - 1} when enabled")
    _require(buffer.penalty_factor >= 0, "reward_model.overlong_buffer.penalty_factor",
             "reward_model.overlong_buffer.penalty_factor must be >= 0")
    _check_filter_groups(cfg)
    _check_graph_nodes(cfg, world_size)
    _check_launcher(cfg)
    skips = cfg.trainer.max_consecutive_skips
    _require(isinstance(skips, int) and skips >= 0, "trainer.max_consecutive_skips",
             f"trainer.max_consecutive_skips={skips!r} must be an integer >= 0 (0 = never stop)")
    _require(cfg.reward_model.timeout_s > 0, "reward_model.timeout_s", "reward_model.timeout_s must be > 0")

    max_model_len = _check_rollout_engine(cfg, prompt_length + response_length, check_installed=not planning)

    train_rows = _check_paths(cfg)
    _require(train_rows >= cfg.data.train_batch_size, "data.train_batch_size",
             f"data.train_batch_size={cfg.data.train_batch_size} is larger than the {train_rows} training rows")
    _check_checkpoint_dir(cfg)
    return RunShape(world_size=world_size, rollout_tp=rollout_tp, rollout_dp=rollout_dp, actor_dp=actor_dp,
                    prompt_length=prompt_length, response_length=response_length,
                    grad_clip=grad_clip, train_rows=train_rows, hf_config=hf_config, max_model_len=max_model_len,
                    critic_grad_clip=critic_grad_clip)


def layout_from_config(megatron: Cfg):
    """The actor's ParallelLayout from actor_rollout_ref.actor.megatron.* (reference and critic reuse it)."""
    from dagrl.engine.specs import PARALLEL_SIZE_NAMES, ParallelLayout

    tp = megatron.tensor_model_parallel_size
    sequence_parallel = bool(megatron.sequence_parallel) and tp > 1
    if megatron.sequence_parallel and tp == 1:
        logger.warning("actor_rollout_ref.actor.megatron.sequence_parallel=true has no effect with TP=1: turned off")
    return ParallelLayout(**{name: megatron[name] for name in PARALLEL_SIZE_NAMES},
                          sequence_parallel=sequence_parallel)
