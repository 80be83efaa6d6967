"""python3 -m dagrl.plan of a CPU run: processes instead of GPUs, and one node's processes against the RAM they
share; GPUs where asked for (--gpu-memory-gb) or where the run needs them (vLLM)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dagrl.config.load import compose
from dagrl.config.tree import Cfg
from dagrl.plan import presets
from dagrl.plan.machine import gpu_gib, has_gpu, ram_gib
from tests.conftest import make_arithmetic_rows
from tests.helpers import write_parquet

NO_GPU = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # as on a machine without one, wherever the test runs


@pytest.fixture(scope="module")
def overrides(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("plan_cpu")
    presets.hf_config("qwen3", "0.6b").save_pretrained(root / "model")  # config.json: all a plan reads
    prompts = write_parquet(str(root / "train.parquet"), make_arithmetic_rows(64, "train", seed=0))
    return [
        f"actor_rollout_ref.model.path={root / 'model'}",
        f"data.train_files={prompts}",
        "data.train_batch_size=8",
        "data.max_prompt_length=64",
        "data.max_response_length=64",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.rollout.name=hf",
        "trainer.n_gpus_per_node=2",
        f"trainer.default_local_dir={root / 'ckpt'}",
    ]


def plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dagrl.plan", *args], capture_output=True, text=True, timeout=120, env=NO_GPU
    )


def test_a_cpu_run_is_planned_against_the_ram_its_processes_share(overrides):
    proc = plan(*overrides)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for expected in (
        "Parallel layout: 1 node(s) x 2 CPU process(es) = 2 ranks",
        "Memory estimate per process (GiB;",
        "torch runtime, gloo, allocator (assumed)",
        "peak ",
        " GiB a process (",
        f"its processes share this machine's {ram_gib():.1f} GiB of RAM",
        "  2 process(es) x ",
    ):
        assert expected in out, expected
    for gpu_only in ("per GPU", "GPU(s)", "CUDA context", "141"):
        assert gpu_only not in out, gpu_only
    peak = float(out.split(" GiB a process (")[0].rsplit("peak ", 1)[1])
    total = float(out.split("  2 process(es) x ")[1].split(" = ")[1].split(" GiB")[0])
    assert total == pytest.approx(2 * peak, abs=0.11)  # both rounded to 0.1
    assert ("fits (" in out) == (total <= ram_gib()) != ("WARNING: exceeds it" in out)


def test_the_ram_is_this_machines():
    with open("/proc/meminfo") as meminfo:
        kib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:"))
    assert 0 < ram_gib() <= kib / (1 << 20) * 1.001


def test_gpus_are_planned_when_asked_for_or_when_the_rollout_needs_them(overrides):
    asked = plan("--gpu-memory-gb", "80", *overrides)
    assert asked.returncode == 0, asked.stderr
    assert "Memory estimate per GPU (GiB;" in asked.stdout and "of 80 GiB: fits" in asked.stdout
    assert "RAM" not in asked.stdout and "1 node(s) x 2 GPU(s)" in asked.stdout
    vllm = [o for o in overrides if not o.startswith("actor_rollout_ref.rollout.name=")] + [
        "actor_rollout_ref.rollout.name=vllm"
    ]
    on_gpus = plan(*vllm)
    assert on_gpus.returncode == 0, on_gpus.stderr
    assert "Memory estimate per GPU" in on_gpus.stdout and "of 141 GiB" in on_gpus.stdout
    refused = plan("--cpu", *vllm)
    assert refused.returncode == 2 and refused.stdout == ""
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("dagrl: error:") and "actor_rollout_ref.rollout.name" in line and "rollout.name=hf" in line


@pytest.mark.parametrize(
    "ram,verdict",
    [
        (1.0, "of 1.0 GiB: WARNING: exceeds it: fewer processes a node (trainer.n_gpus_per_node)"),
        (512.0, "of 512.0 GiB: fits ("),
    ],
)
def test_a_node_whose_ram_cannot_hold_its_processes_gets_a_warning(overrides, ram, verdict):
    from dagrl.config.validate import planned_world_size, preflight
    from dagrl.plan import make_plan
    from dagrl.plan.report import render

    cfg = Cfg(compose(overrides))
    text = render(make_plan(cfg, preflight(cfg, world_size=planned_world_size(cfg)), cpu_memory_gib=ram))
    line = next(line for line in text.splitlines() if "2 process(es) x" in line)
    assert verdict in line


@pytest.mark.parametrize("hidden", ["", "-1"])
def test_no_gpu_is_seen_where_cuda_visible_devices_hides_them(monkeypatch, hidden):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
    assert not has_gpu()


@pytest.mark.parametrize("visible,gib", [(None, 81559 / 1024), ("1", 143771 / 1024), ("0,1", 81559 / 1024)])
def test_a_gpu_machine_is_planned_for_its_own_gpus(tmp_path, monkeypatch, visible, gib):
    smi = tmp_path / "nvidia-smi"  # as nvidia-smi answers on a machine with an H100 and an H200
    smi.write_text("#!/bin/sh\nprintf '0, 81559\\n1, 143771\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpu_gib() == pytest.approx(gib)
    smi.unlink()
    assert gpu_gib() is None  # no nvidia-smi: the plan falls back to --gpu-memory-gb's default
