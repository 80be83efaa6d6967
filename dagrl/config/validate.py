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
    "actor_rollout_ref.actor.loss_agg_mode": ("token-mean",),
    "actor_rollout_ref.actor.policy_loss.loss_mode": ("vanilla",),
    "actor_rollout_ref.actor.kl_loss_type": ("k1", "k2", "k3", "low_var_kl", "abs", "mse", "kl"),
    "actor_rollout_ref.actor.optim.lr_decay_style": ("constant", "linear", "cosine"),
    "actor_rollout_ref.actor.megatron.param_dtype": ("float32", "fp32", "bfloat16", "bf16"),
    "actor_rollout_ref.rollout.dtype": ("float32", "fp32", "bfloat16", "bf16"),
    "algorithm.adv_estimator": ("grpo",),
    "algorithm.kl_penalty": ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"),
    "algorithm.kl_ctrl.type": ("fixed", "adaptive"),
    "data.truncation": ("error", "left", "right", "middle"),
    "reward_model.reward_manager": ("naive", "dapo"),
    "reward_model.on_error": ("zero", "raise"),
    "trainer.resume_mode": ("auto", "disable", "resume_path"),
    "trainer.launcher": ("local",),
}
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


def read_hf_config(model_path: str | None) -> dict:
    _require(bool(model_path), "actor_rollout_ref.model.path",
             "actor_rollout_ref.model.path is not set: point it at a local HF model directory")
    path = Path(os.path.expanduser(model_path))
    _require(path.is_dir(), "actor_rollout_ref.model.path",
             f"model directory {path} does not exist: fix actor_rollout_ref.model.path")
    config_file = path / "config.json"
    _require(config_file.is_file(), "actor_rollout_ref.model.path",
             f"{config_file} is missing: actor_rollout_ref.model.path must be an HF model directory")
    try:
        hf_config = json.loads(config_file.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError("actor_rollout_ref.model.path", f"{config_file} is not valid JSON ({err})") from None
    model_type = hf_config.get("model_type")
    _require(model_type in SUPPORTED_MODEL_TYPES, "actor_rollout_ref.model.path",
             f"model type {model_type!r} in {config_file} is not supported; supported: "
             f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    return hf_config


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


def _check_checkpoint_dir(cfg: Cfg) -> None:
    root = Path(os.path.expanduser(cfg.trainer.default_local_dir))
    existing = next((p for p in [root, *root.parents] if p.exists()), None)
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


def preflight(cfg: Cfg) -> RunShape:
    """Validate everything checkable before models are built; raise ConfigError on the first problem."""
    _check_choices(cfg)
    world_size = world_size_from_env(cfg)
    hf_config = read_hf_config(cfg.actor_rollout_ref.model.path)
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
        check_layout(SimpleNamespace(**hf_config), layout_from_config(megatron), world_size)
    actor_dp = world_size // model_parallel

    rollout = cfg.actor_rollout_ref.rollout
    rollout_tp = rollout.tensor_model_parallel_size or layout_tp
    _require(rollout.name != "hf" or rollout_tp == 1, "actor_rollout_ref.rollout.tensor_model_parallel_size",
             f"the hf rollout runs one full model per rank: set actor_rollout_ref.rollout.tensor_model_parallel_size=1 "
             f"(now {rollout_tp}) or use rollout.name=vllm")
    _divides(world_size, rollout_tp, "actor_rollout_ref.rollout.tensor_model_parallel_size", "world size by rollout TP")
    rollout_dp = world_size // rollout_tp
    _require(rollout_dp == actor_dp, "actor_rollout_ref.rollout.tensor_model_parallel_size",
             f"rollout DP ({rollout_dp}) differs from actor DP ({actor_dp}); moving batches between the two layouts "
             f"is not available yet: make rollout TP equal to the actor's TP x PP x CP")
    _check_batches(cfg, rollout_dp, actor_dp)

    prompt_length = _alias(cfg, "data.max_prompt_length", "actor_rollout_ref.rollout.prompt_length")
    response_length = _alias(cfg, "data.max_response_length", "actor_rollout_ref.rollout.response_length")
    _positive_int(cfg, "data.max_prompt_length")
    _positive_int(cfg, "data.max_response_length")
    grad_clip = _alias(cfg, "actor_rollout_ref.actor.grad_clip", "actor_rollout_ref.actor.optim.clip_grad")
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
    skips = cfg.trainer.max_consecutive_skips
    _require(isinstance(skips, int) and skips >= 0, "trainer.max_consecutive_skips",
             f"trainer.max_consecutive_skips={skips!r} must be an integer >= 0 (0 = never stop)")
    _require(cfg.reward_model.timeout_s > 0, "reward_model.timeout_s", "reward_model.timeout_s must be > 0")

    train_rows = _check_paths(cfg)
    _require(train_rows >= cfg.data.train_batch_size, "data.train_batch_size",
             f"data.train_batch_size={cfg.data.train_batch_size} is larger than the {train_rows} training rows")
    _check_checkpoint_dir(cfg)
    return RunShape(world_size=world_size, rollout_tp=rollout_tp, rollout_dp=rollout_dp, actor_dp=actor_dp,
                    prompt_length=prompt_length, response_length=response_length,
                    grad_clip=grad_clip, train_rows=train_rows, hf_config=hf_config)


def layout_from_config(megatron: Cfg):
    """The actor's ParallelLayout from actor_rollout_ref.actor.megatron.* (reference and critic reuse it)."""
    from dagrl.engine.specs import PARALLEL_SIZE_NAMES, ParallelLayout

    tp = megatron.tensor_model_parallel_size
    sequence_parallel = bool(megatron.sequence_parallel) and tp > 1
    if megatron.sequence_parallel and tp == 1:
        logger.warning("actor_rollout_ref.actor.megatron.sequence_parallel=true has no effect with TP=1: turned off")
    return ParallelLayout(**{name: megatron[name] for name in PARALLEL_SIZE_NAMES},
                          sequence_parallel=sequence_parallel)
