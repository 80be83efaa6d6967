"""bf16 parity with HF (dense and MoE), bit-equal log-probs across tensor-parallel ranks, and offload bytes on GPU;
each check runs in its own torchrun launch of engine_checks.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).with_name("engine_checks.py")


def run_check(gpus: int, work: Path, *args: str) -> list[dict]:
    if torch.cuda.device_count() < gpus:
        pytest.skip(f"needs {gpus} GPUs")
    # Deterministic TransformerEngine attention backward: the offload check compares losses bit for bit.
    env = {**os.environ, "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(gpus),
                           str(WORKER), args[0], str(work), *args[1:]], capture_output=True, text=True, timeout=400,
                          env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    results = json.loads((work / "result.json").read_text())
    print("\nRESULT", json.dumps(results))
    return results


@pytest.mark.parametrize("family", ["qwen3", "qwen3_moe"])
def test_bf16_log_probs_match_hf_and_agree_across_tp_ranks(family, tmp_path):
    per_rank = run_check(2, tmp_path, "parity", family)
    assert all(r["bit_equal_across_tp"] for rank in per_rank for r in rank)
    # At the random init's logits (final-norm gain 1; gain 3 is reported, not asserted). bf16 has a floor here: HF's
    # own bf16 forward is ~0.012 from the exact (fp32) value of the same weights, so the engine is held to HF's own
    # bf16 error (x1.25) rather than to a fixed 1e-2 (measured on 2xH200: 0.0105 dense, 0.0112 MoE vs HF bf16).
    at_init = per_rank[0][0]
    assert at_init["logit_scale"] == 1.0 and at_init["cosine"] >= 0.99 and at_init["vs_fp32_cosine"] >= 0.99, at_init
    floor = at_init["hf_bf16_vs_fp32_mean_abs_diff"]
    assert at_init["vs_fp32_mean_abs_diff"] <= 1.25 * floor and at_init["mean_abs_diff"] <= 1.25 * floor, at_init


def test_offload_frees_its_bytes_and_keeps_the_step(tmp_path):
    result = run_check(1, tmp_path, "offload")[0]
    for name, freed in result["freed"].items():
        assert freed["fraction"] >= 0.9, (name, freed)
    assert result["cycled"] == result["plain"] and result["flagged"] == result["plain"], result
    assert not result["flagged_params_on_device_between_steps"]
