"""Pre-flight rules between keys of different sections that the schema's per-key types and ranges cannot see: a
schedule whose floor is above its peak, a setting that has no effect without another, a profiled step the run never
reaches."""
from __future__ import annotations

from dagrl.config.checks import get, require
from dagrl.config.derived import total_steps
from dagrl.config.tree import Cfg


def check_lr_floor(cfg: Cfg, prefix: str) -> None:
    """min_lr above the peak lr would make a decaying schedule climb (Megatron's scheduler asserts on it once the
    models are built)."""
    lr, min_lr = get(cfg, f"{prefix}.lr"), get(cfg, f"{prefix}.min_lr")
    if isinstance(lr, (int, float)) and isinstance(min_lr, (int, float)):
        require(min_lr <= lr, f"{prefix}.min_lr",
                f"{prefix}.min_lr={min_lr} is above {prefix}.lr={lr}: the schedule decays from lr down to min_lr; "
                f"set min_lr <= lr (e.g. {prefix}.min_lr={lr / 10:g})")


def check_overlong_manager(cfg: Cfg) -> None:
    """The overlong-buffer penalty is the dapo reward manager's: with naive it would silently not apply."""
    reward = cfg.reward_model
    require(not reward.overlong_buffer.enable or reward.reward_manager == "dapo", "reward_model.overlong_buffer.enable",
            f"reward_model.overlong_buffer.enable=true has no effect with reward_model.reward_manager="
            f"{reward.reward_manager} (the penalty is the dapo manager's): set reward_model.reward_manager=dapo, or "
            f"drop overlong_buffer.enable")


def check_profiled_steps(cfg: Cfg, train_rows: int) -> None:
    """Every step global_profiler.steps names is one the run reaches (`derived.total_steps`)."""
    steps = cfg.global_profiler.steps
    if cfg.global_profiler.tool is None or not steps:
        return
    total = total_steps(cfg, train_rows)
    beyond = sorted(step for step in steps if step > total)
    require(not beyond, "global_profiler.steps",
            f"global_profiler.steps={list(steps)}: step(s) {', '.join(map(str, beyond))} beyond this run's {total} "
            f"step(s) (trainer.total_training_steps / total_epochs) would never be profiled: pick steps in 1..{total}")
