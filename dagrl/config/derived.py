"""Facts derived from the config that the run and `dagrl.plan` both need (torch-free, one place)."""

from __future__ import annotations

from dagrl.config.tree import Cfg


def skips_old_log_prob(cfg: Cfg) -> bool:
    """One optimizer step per batch: old log-probs equal the update's own (detached) log-probs, so the extra
    forward is skipped. Not when KL-in-reward needs them first, nor when the rollout returned its own log-probs
    (comparing the two is the point of asking for them), nor when off-policy correction reads them as pi_prox
    before the update (AReaL's decoupled loss likewise requires recomputing them), nor when distillation compares
    them with the teacher's."""
    actor = cfg.actor_rollout_ref.actor
    return (
        actor.ppo_epochs == 1
        and actor.ppo_mini_batch_size == cfg.data.train_batch_size
        and not cfg.algorithm.use_kl_in_reward
        and not cfg.actor_rollout_ref.rollout.calculate_log_probs
        and not corrects_off_policy(cfg)
        and not cfg.distillation.enabled
    )


def corrects_off_policy(cfg: Cfg) -> bool:
    """Decoupled PPO or sequence masking (dagrl/algo/off_policy.py) is on."""
    actor = cfg.actor_rollout_ref.actor
    return actor.policy_loss.off_policy != "none" or actor.mis_ratio_low is not None or actor.mis_ratio_high is not None


def needs_reference(cfg: Cfg) -> bool:
    """A frozen reference model exists only when a KL term needs it."""
    return bool(cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward)


def total_steps(cfg: Cfg, train_rows: int | None) -> int | None:
    """The run's steps: trainer.total_epochs over `train_rows` prompts (whole batches of data.train_batch_size per
    epoch), capped by trainer.total_training_steps; None when neither is known (`train_rows` None, no cap)."""
    limit = cfg.trainer.total_training_steps
    by_epochs = None if train_rows is None else train_rows // cfg.data.train_batch_size * cfg.trainer.total_epochs
    if by_epochs is None:
        return limit or None
    return min(limit, by_epochs) if limit else by_epochs


def trained_section(cfg: Cfg, role: str) -> Cfg:
    """The section whose optimizer trains `role` (actor or critic)."""
    return cfg.critic if role == "critic" else cfg.actor_rollout_ref.actor


def optimizer_steps(cfg: Cfg, total_training_steps: int, role: str = "actor") -> int:
    """Optimizer steps the actor (or critic) takes in a run of `total_training_steps`."""
    section = trained_section(cfg, role)
    if role == "actor":  # no actor update during the critic warmup
        total_training_steps = max(total_training_steps - cfg.trainer.critic_warmup, 0)
    return total_training_steps * section.ppo_epochs * (cfg.data.train_batch_size // section.ppo_mini_batch_size)


def lora_served_merged(cfg: Cfg) -> bool:
    """The rollout samples from W + s·B·A: LoRA's merged sync, or adapter-only sync to a rollout whose load_adapter
    merges (its class says adapter_merged: the hf rollout). The actor then computes with the same merge. False
    without adapters (rank 0), before any rollout module is imported."""
    from dagrl.engine.rollout.registry import engine_declares

    lora = cfg.actor_rollout_ref.model.lora
    if not lora.rank:
        return False
    return bool(lora.merge) or engine_declares(cfg.actor_rollout_ref.rollout.name, "adapter_merged")
