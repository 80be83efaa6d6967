"""Pre-flight of an optimizer section (actor_rollout_ref.actor.optim, critic.optim): its keys' types and ranges are
the schema's (dagrl/config/schema/optim.py); these are the rules between them."""

from __future__ import annotations

import math

from dagrl.config.checks import get
from dagrl.config.derived import optimizer_steps, total_steps, trained_section
from dagrl.config.errors import require
from dagrl.config.tree import Cfg


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


def check_lr_floor(cfg: Cfg, prefix: str) -> None:
    """min_lr above the peak lr would make a decaying schedule climb (Megatron's scheduler asserts on it once the
    models are built)."""
    lr, min_lr = get(cfg, f"{prefix}.lr"), get(cfg, f"{prefix}.min_lr")
    if isinstance(lr, (int, float)) and isinstance(min_lr, (int, float)):
        require(
            min_lr <= lr,
            f"{prefix}.min_lr",
            f"{prefix}.min_lr={min_lr} is above {prefix}.lr={lr}: the schedule decays from lr down to min_lr; "
            f"set min_lr <= lr (e.g. {prefix}.min_lr={lr / 10:g})",
        )


def check_warmup_length(cfg: Cfg, prefix: str, role: str, train_rows: int | None) -> None:
    """lr_warmup_steps counts optimizer steps (one per mini-batch, Megatron's scheduler); a warmup at least as long
    as the run's optimizer steps never reaches the peak lr, and a warmup longer than a short run keeps the lr near 0
    throughout: the run trains next to nothing."""
    warmup, steps = get(cfg, f"{prefix}.lr_warmup_steps"), total_steps(cfg, train_rows)
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup <= 0 or steps is None:
        return
    updates, section = optimizer_steps(cfg, steps, role), trained_section(cfg, role)
    if updates == 0:  # no update at all is other rules' (batch sizes, trainer.critic_warmup)
        return
    mini_batches = cfg.data.train_batch_size // section.ppo_mini_batch_size
    require(
        warmup < updates,
        f"{prefix}.lr_warmup_steps",
        f"{prefix}.lr_warmup_steps={warmup} is not below the {updates} optimizer step(s) this run takes "
        f"({updates // (section.ppo_epochs * mini_batches)} training step(s) x ppo_epochs {section.ppo_epochs} x "
        f"{mini_batches} mini-batch(es) a step): the lr would never reach {prefix}.lr; set "
        f"{prefix}.lr_warmup_steps below {updates} (it counts optimizer steps, one per mini-batch), or use "
        f"{prefix}.lr_warmup_steps_ratio",
    )
