"""global_profiler.* (dagrl/trainer/profiler.py): a profiled step writes its table, with the graph nodes' ranges,
and changes nothing in the run; a step profiled again never overwrites the earlier table."""

from __future__ import annotations

import sys

import torch

from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.dag.graph import graph_from_config
from dagrl.trainer.profiler import NODE_RANGE, StepProfiler, node_range
from tests.conftest import cpu_run_overrides
from tests.helpers import metrics_by_step, run_concurrently


def train(*runs: list[str]) -> list[str]:
    """The stderr of each run of `python -m dagrl.main_dag <overrides>`, all at the same time, each on one thread (two
    fit the two cores; every run compared computes alike)."""
    results = run_concurrently(
        [([sys.executable, "-m", "dagrl.main_dag", *overrides], {"OMP_NUM_THREADS": "1"}) for overrides in runs]
    )
    for code, stderr in results:
        assert code == 0, stderr[-3000:]
    return [stderr for _, stderr in results]


def test_a_profiled_step_writes_its_table_and_changes_nothing(tiny_model, tiny_data, tmp_path):
    plain, profiled = tmp_path / "plain", tmp_path / "profiled"
    args = cpu_run_overrides(
        tiny_model, tiny_data, profiled, **{"global_profiler.tool": "torch", "global_profiler.steps": "[2]"}
    )
    _, stderr = train(cpu_run_overrides(tiny_model, tiny_data, plain), args)
    table = profiled / "profile" / "step_2_rank0.txt"  # save_path defaults to <default_local_dir>/profile
    assert "profiled step 2 on rank 0" in stderr and str(table) in stderr
    assert sorted(p.name for p in table.parent.iterdir()) == [table.name]  # step 1 not profiled, no trace
    text = table.read_text()
    assert "step wall time:" in text and "host op time" in text and "top 40 ops by self_cpu_time_total" in text
    for node in graph_from_config(Cfg(compose(args)).dag).nodes:
        assert f"{NODE_RANGE}{node.id} " in text, f"no range of node {node.id}"
    assert metrics_by_step(profiled) == metrics_by_step(plain)  # losses, grad norms, scores: bit-identical


def test_a_step_profiled_again_gets_a_new_file(tmp_path):
    options = Cfg(
        {"tool": "torch", "steps": [3], "ranks": [0, 2], "save_path": str(tmp_path / "p"), "with_trace": True}
    )

    def step(number: int) -> int:
        with node_range("work"):
            torch.ones(64, 64) @ torch.ones(64, 64)
        return number * 10

    profiler = StepProfiler(options, rank=2)
    assert [profiler.run(n, step) for n in (2, 3, 3)] == [20, 30, 30]
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [
        "step_3_rank2.1.trace.json.gz",
        "step_3_rank2.1.txt",
        "step_3_rank2.trace.json.gz",
        "step_3_rank2.txt",
    ]
    assert "dagrl/node/work" in (tmp_path / "p" / "step_3_rank2.1.txt").read_text()
    assert StepProfiler(options, rank=1).run(3, step) == 30  # a rank not listed: nothing written
    assert len(list((tmp_path / "p").iterdir())) == 4
