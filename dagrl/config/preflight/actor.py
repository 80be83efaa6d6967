"""Pre-flight of actor_rollout_ref.actor (and the model keys it trains with): the PPO clip, trainable top layers,
packing under context parallelism, the off-policy correction of stale samples, and what its checkpoints save and
load (TransformerConfig overrides: transformer_config.py)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from dagrl.config.checks import alias, as_list, get, positive_int
from dagrl.config.errors import require
from dagrl.config.preflight.graph import graph_roles
from dagrl.config.preflight.optim import check_optim
from dagrl.config.tree import Cfg
from dagrl.utils import precision

logger = logging.getLogger(__name__)


def check_actor(cfg: Cfg, hf_config: dict):
    """The actor's own keys; returns its grad clip."""
    grad_clip = alias(cfg, "actor_rollout_ref.actor.grad_clip", "actor_rollout_ref.actor.optim.clip_grad")
    check_optim(cfg, "actor_rollout_ref.actor.optim")
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


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_off_policy(cfg: Cfg) -> None:
    """Truncated importance sampling, decoupled PPO and sequence masking (dagrl/algo/off_policy.py); the off_policy
    name is in the schema's choices."""
    actor = cfg.actor_rollout_ref.actor
    behaviour = cfg.actor_rollout_ref.rollout.calculate_log_probs is True or cfg.async_training.partial_rollout is True
    fix = "set actor_rollout_ref.rollout.calculate_log_probs=true"
    cap, key = actor.tis_imp_ratio_cap, "actor_rollout_ref.actor.tis_imp_ratio_cap"
    require(_number(cap) and (cap <= 0 or cap >= 1), key, f"{key}={cap!r} must be -1 (off) or a cap >= 1, e.g. 2")
    require(cap <= 0 or behaviour, key, f"{key} needs the rollout's log-probs: {fix}")
    key = "actor_rollout_ref.actor.policy_loss.behav_imp_weight_cap"
    cap = actor.policy_loss.behav_imp_weight_cap
    require(
        cap is None or (_number(cap) and cap > 1),
        key,
        f"{key}={cap!r} must be a number > 1 (AReaL masks tokens whose pi_prox/pi_behav exceeds it), e.g. 5, "
        f"or null for no cap",
    )
    if actor.policy_loss.off_policy == "decoupled":
        key = "actor_rollout_ref.actor.policy_loss.off_policy"
        require(
            behaviour,
            key,
            f"{key}=decoupled weights tokens by pi_prox/pi_behav and needs the rollout's log-probs: {fix}",
        )
        require(
            actor.tis_imp_ratio_cap <= 0,
            "actor_rollout_ref.actor.tis_imp_ratio_cap",
            f"actor_rollout_ref.actor.tis_imp_ratio_cap with {key}=decoupled would weight each token by "
            f"pi_old/pi_rollout twice: set actor_rollout_ref.actor.tis_imp_ratio_cap=-1 (behav_imp_weight_cap "
            f"bounds decoupled's weight)",
        )
    for side, bound, valid in (
        ("low", actor.mis_ratio_low, "a number in (0, 1)"),
        ("high", actor.mis_ratio_high, "a number > 1"),
    ):
        key = f"actor_rollout_ref.actor.mis_ratio_{side}"
        ok = _number(bound) and (0 < bound < 1 if side == "low" else bound > 1)
        require(
            bound is None or ok,
            key,
            f"{key}={bound!r} must be null (no bound) or {valid}: the band of kept "
            f"sequence ratios must hold 1, an on-policy sequence's ratio",
        )
        require(
            bound is None or behaviour,
            key,
            f"{key} masks sequences by pi_old/pi_rollout and needs the rollout's log-probs: {fix}",
        )


CHECKPOINT_CONTENTS = ("model", "optimizer", "extra", "hf_model")


def check_actor_checkpoint(cfg: Cfg) -> None:
    """actor.checkpoint.save_contents/load_contents, the start from a Megatron dist checkpoint, the ref's offload."""
    for name in ("save_contents", "load_contents"):
        key = f"actor_rollout_ref.actor.checkpoint.{name}"
        value = get(cfg, key)
        parts = as_list(value) if isinstance(value, (str, list, tuple)) else None
        require(
            parts is not None and all(part in CHECKPOINT_CONTENTS for part in parts),
            key,
            f"{key}={value!r} must be a list of: {', '.join(CHECKPOINT_CONTENTS)}",
        )
        require(
            "model" in parts,
            key,
            f"{key}={list(parts)} must include model (a checkpoint is resumed from its "
            f"weights; add hf_model for an HF copy as well)",
        )
    checkpoint = cfg.actor_rollout_ref.actor.checkpoint
    unsaved = [
        part
        for part in as_list(checkpoint.load_contents)
        if part not in as_list(checkpoint.save_contents) and part != "hf_model"
    ]
    require(
        not unsaved,
        "actor_rollout_ref.actor.checkpoint.load_contents",
        f"actor_rollout_ref.actor.checkpoint.load_contents restores {unsaved} that save_contents="
        f"{list(as_list(checkpoint.save_contents))} does not save, so this run's own checkpoints could not be "
        f"resumed: add {unsaved} to actor_rollout_ref.actor.checkpoint.save_contents or drop them from "
        f"load_contents",
    )
    for flag in (
        "actor_rollout_ref.actor.megatron.use_dist_checkpointing",
        "actor_rollout_ref.ref.megatron.param_offload",
    ):
        require(isinstance(get(cfg, flag), bool), flag, f"{flag}={get(cfg, flag)!r} must be true or false")
    megatron = cfg.actor_rollout_ref.actor.megatron
    key = "actor_rollout_ref.actor.megatron.dist_checkpointing_path"
    path = megatron.dist_checkpointing_path
    if not megatron.use_dist_checkpointing:
        require(
            path is None,
            key,
            f"{key} is set but actor_rollout_ref.actor.megatron.use_dist_checkpointing=false: "
            f"set it to true to start from that checkpoint, or drop {key}",
        )
        return
    require(
        bool(path),
        key,
        "actor_rollout_ref.actor.megatron.use_dist_checkpointing=true needs "
        f"{key}=<dir of a Megatron torch_dist checkpoint>",
    )
    resolved = Path(os.path.expanduser(str(path)))
    require(resolved.is_dir(), key, f"{key}={path}: no such directory")
    require(
        (resolved / "metadata.json").is_file(),
        key,
        f"{key}={path} is not a Megatron dist checkpoint (no metadata.json): point it at a converted checkpoint "
        f"or a dagrl global_step_N/actor directory",
    )


def say_clip_reversed(cfg: Cfg) -> None:
    """A lower clip range wider than the upper one lets a token's probability fall further in an update than it may
    rise: the reverse of DAPO's clip-higher (low 0.2, high 0.28), usually the two values swapped. Legal, so said."""
    actor = cfg.actor_rollout_ref.actor
    low = actor.clip_ratio if actor.clip_ratio_low is None else actor.clip_ratio_low
    high = actor.clip_ratio if actor.clip_ratio_high is None else actor.clip_ratio_high
    if _number(low) and _number(high) and low > high:
        logger.warning(
            "actor_rollout_ref.actor.clip_ratio_low=%g is above clip_ratio_high=%g: the ratio is clipped to "
            "[%g, %g], so a token's probability may fall further than it may rise, the reverse of DAPO's "
            "clip-higher; for clip-higher swap them (e.g. clip_ratio_low=0.2 clip_ratio_high=0.28)",
            low,
            high,
            1 - low,
            1 + high,
        )
