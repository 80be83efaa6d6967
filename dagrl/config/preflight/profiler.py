"""Pre-flight of global_profiler.* (verl's names; dagrl/trainer/profiler.py runs it). The types and ranges of its
keys are the schema's (dagrl/config/schema/); these are the rules between them and the run."""

from __future__ import annotations

from dagrl.config.derived import total_steps
from dagrl.config.errors import require
from dagrl.config.path_values import check_writable_dir
from dagrl.config.tree import Cfg


TOOLS = ("torch",)


def check_global_profiler(cfg: Cfg, world_size: int) -> None:
    """A supported tool with the steps it profiles, ranks inside the launch of `world_size` processes, and a
    save_path that can be written (with_trace is a bool: the schema's check)."""
    options = cfg.global_profiler
    tool, steps, ranks, save_path = options.tool, options.steps, options.ranks, options.save_path
    require(
        tool is None or tool in TOOLS,
        "global_profiler.tool",
        f"global_profiler.tool: {tool!r} is not supported; use torch or null",
    )
    if tool is None:
        require(
            steps is None,
            "global_profiler.steps",
            f"global_profiler.steps={steps} set but global_profiler.tool is null: set global_profiler.tool=torch "
            f"(or drop the steps)",
        )
        require(
            options.with_trace is not True,
            "global_profiler.with_trace",
            "global_profiler.with_trace=true adds a Chrome trace to each profiled step, but global_profiler.tool "
            "is null (nothing is profiled): set global_profiler.tool=torch global_profiler.steps=[N,...], or "
            "drop with_trace",
        )
        return
    require(
        steps is not None,
        "global_profiler.steps",
        f"global_profiler.tool={tool} needs the steps to profile: set "
        f"global_profiler.steps=[N,...] (global steps, from 1)",
    )
    outside = sorted({rank for rank in ranks if rank >= world_size})
    require(
        not outside,
        "global_profiler.ranks",
        f"global_profiler.ranks={ranks}: rank(s) {', '.join(map(str, outside))} not in this launch of {world_size} "
        f"process(es) (global ranks 0..{world_size - 1}): drop them",
    )
    require(
        isinstance(save_path, str) and save_path.strip() != "",
        "global_profiler.save_path",
        f"global_profiler.save_path={save_path!r} must be a directory path (an empty one would write the tables "
        f"into the current directory); leave the default ${{trainer.default_local_dir}}/profile or set a path",
    )
    check_writable_dir("global_profiler.save_path", save_path, "profile directory")


def check_profiled_steps(cfg: Cfg, train_rows: int) -> None:
    """Every step global_profiler.steps names is one the run reaches (`derived.total_steps`)."""
    steps = cfg.global_profiler.steps
    if cfg.global_profiler.tool is None or not steps:
        return
    total = total_steps(cfg, train_rows)
    beyond = sorted(step for step in steps if step > total)
    require(
        not beyond,
        "global_profiler.steps",
        f"global_profiler.steps={list(steps)}: step(s) {', '.join(map(str, beyond))} beyond this run's {total} "
        f"step(s) (trainer.total_training_steps / total_epochs) would never be profiled: pick steps in 1..{total}",
    )
