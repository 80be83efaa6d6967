"""Pre-flight of an optimizer section (actor_rollout_ref.actor.optim, critic.optim): its keys' types and ranges are
the schema's (dagrl/config/schema/optim.py); these are the rules between them."""

from __future__ import annotations

import math

from dagrl.config.checks import get
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
