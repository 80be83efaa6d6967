from __future__ import annotations

from tests.reliability.corpus.case import Case

TOPIC = "The per-step profiler (global_profiler.*, verl's names)"
CASES: tuple[Case, ...] = (
    Case(
        "profiler_tool_unsupported",
        "verl's `global_profiler.tool=nsys`",
        ("global_profiler.tool=nsys", "global_profiler.steps=[1]"),
        ("global_profiler.tool", "'nsys' is not supported", "use torch or null"),
    ),
    Case(
        "profiler_steps_without_tool",
        "`global_profiler.steps=[2]` with the tool left null (would profile nothing)",
        ("global_profiler.steps=[2]",),
        ("global_profiler.steps", "global_profiler.tool is null", "set global_profiler.tool=torch"),
    ),
    Case(
        "profiler_tool_without_steps",
        "`global_profiler.tool=torch` without steps",
        ("global_profiler.tool=torch",),
        ("global_profiler.steps", "set global_profiler.steps=[N,...]"),
    ),
    Case(
        "profiler_step_zero",
        "`global_profiler.steps=[0,2]` (global steps count from 1)",
        ("global_profiler.tool=torch", "global_profiler.steps=[0,2]"),
        ("global_profiler.steps=[0, 2]", "list of positive integers"),
    ),
    Case(
        "profiler_rank_outside_launch",
        "`global_profiler.ranks=[0,3]` on a one-process launch",
        ("global_profiler.tool=torch", "global_profiler.steps=[1]", "global_profiler.ranks=[0,3]"),
        ("global_profiler.ranks", "rank(s) 3 not in this launch of 1 process(es)", "drop them"),
    ),
    Case(
        "profiler_step_beyond_run",
        "`global_profiler.steps=[5]` in a 2-step run (profiles nothing)",
        ("global_profiler.tool=torch", "global_profiler.steps=[5]"),
        ("global_profiler.steps=[5]", "beyond this run's 2 step(s)", "pick steps in 1..2"),
    ),
    Case(
        "profiler_trace_without_tool",
        "`global_profiler.with_trace=true` with the tool left null (traced nothing)",
        ("global_profiler.with_trace=true",),
        ("global_profiler.with_trace=true", "global_profiler.tool is null"),
    ),
    Case(
        "profiler_save_path_empty",
        "`global_profiler.save_path=` (empty: tables into the current directory)",
        ("global_profiler.tool=torch", "global_profiler.steps=[1]", "global_profiler.save_path="),
        ("global_profiler.save_path=''", "must be a directory path"),
    ),
    Case(
        "profiler_ranks_empty",
        "`global_profiler.ranks=[]`",
        ("global_profiler.tool=torch", "global_profiler.steps=[1]", "global_profiler.ranks=[]"),
        ("global_profiler.ranks=[]", "non-empty list"),
    ),
    Case(
        "verl_profile_steps",
        "verl's `trainer.profile_steps=[1]`",
        ("trainer.profile_steps=[1]",),
        ("'trainer.profile_steps' is verl's", "global_profiler.tool=torch global_profiler.steps=[N,...]"),
    ),
)
