"""`python3 -m dagrl.doctor` launched as a 2-process CPU run is (torchrun, gloo): a correct model passes at TP2, PP2
and EP2, and a TP-sharding mistake that TP1 cannot show (tests/doctor/test_numerics.py) is named at its layer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import cpu_run_overrides
from tests.doctor.test_numerics import model_dir
from tests.engine.engine_helpers import free_port

PLANTED = Path(__file__).parent / "planted.py"
MEGATRON = "actor_rollout_ref.actor.megatron."


@pytest.mark.parametrize(
    ("family", "layout", "plant", "verdict"),
    [
        # slow: the planted TP2 case below passes layer 0 at TP2 in the default suite
        pytest.param(
            "llama", {"tensor_model_parallel_size": 2}, "none", "the weights map exactly", marks=pytest.mark.slow
        ),
        ("qwen3", {"pipeline_model_parallel_size": 2}, "none", "the weights map exactly"),
        ("qwen3_moe", {"expert_model_parallel_size": 2}, "none", "the weights map exactly"),
        (
            "llama",
            {"tensor_model_parallel_size": 2},
            "tp_fc1_split",
            "mapping error: the actor parts from HF at layer 1",
        ),
    ],
    ids=["tp2", "pp2", "ep2", "tp2_planted_fc1_split"],
)
def test_the_doctor_at_a_two_process_layout(tiny_data, tmp_path, family, layout, plant, verdict):
    model = model_dir(tmp_path / "model", family)
    overrides = cpu_run_overrides(
        model,
        tiny_data,
        tmp_path / "out",
        **{"trainer.n_gpus_per_node": 2, "actor_rollout_ref.rollout.tensor_model_parallel_size": 1},
        **{MEGATRON + key: value for key, value in layout.items()},
    )
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    command += [
        "--master-port",
        str(free_port()),
        str(PLANTED),
        plant,
        "--prompt-tokens",
        "6",
        "--response-tokens",
        "6",
    ]
    done = subprocess.run(
        command + overrides,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    report = done.stdout
    assert done.returncode == (0 if plant == "none" else 1), f"{report}\n{done.stderr[-3000:]}"
    assert report.count("numerics at ") == 1, report  # rank 0 reports
    assert ", local spec, hf rollout" in report, report  # the actor's kernels: Megatron's local modules on CPU
    assert report.splitlines()[-1].startswith(f"verdict: {verdict}"), report
    if plant != "none":  # the layer-1 fc1 shards on both TP ranks, and the export's gate/up of that layer
        assert "linear_fc1.weight (96, 64) <- model.layers.1.mlp.gate_proj.weight" in report, report
        assert "TP 0/2" in report and "TP 1/2" in report, report
        assert "model.layers.1.mlp.gate_proj.weight: max abs difference" in report, report
