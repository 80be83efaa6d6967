"""The global_profiler section: each key's type, default, range, choices and doc (conf/global_profiler/default.yaml is
written from it)."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.config.schema.spec import RANK_LIST, STEP_LIST, OutDir, Section, key


@dataclass(frozen=True)
class GlobalProfiler(Section):
    """Per-step profiler (verl's global_profiler section): each step in `steps` runs under torch.profiler on each rank
    in `ranks`, which writes <save_path>/step_<N>_rank<R>.txt (wall, kernel and host-op time, per-node totals, top
    ops)."""

    tool: str | None = key(
        None, "null: off | torch: profile the steps with torch.profiler (host ops; CUDA kernels on a GPU)"
    )
    steps: list | None = key(None, "global steps to profile, e.g. [2,3]; needs tool=torch", STEP_LIST)
    ranks: list = key(
        [0], "global ranks that profile those steps (separate pools: rollout-pool ranks profile their batch)", RANK_LIST
    )
    save_path: OutDir = key(
        "${trainer.default_local_dir}/profile",
        "directory of the step_<N>_rank<R>.txt tables (never overwritten: a rerun adds .1, .2, ...)",
    )
    with_trace: bool = key(
        False, "also write the Chrome trace step_<N>_rank<R>.trace.json.gz beside the table (large; open in Perfetto)"
    )
