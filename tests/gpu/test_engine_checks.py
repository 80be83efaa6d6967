"""bf16 parity with HF (dense and MoE), context parallelism against CP1 in bf16, bit-equal log-probs across
tensor-parallel ranks, and offload bytes on GPU; each check runs in its own torchrun launch of engine_checks.py."""

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
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            str(gpus),
            str(WORKER),
            args[0],
            str(work),
            *args[1:],
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    results = json.loads((work / "result.json").read_text())
    print("\nRESULT", json.dumps(results))
    return results


@pytest.mark.parametrize("family", ["qwen3", "qwen3_moe"])
def test_bf16_log_probs_match_hf_and_agree_across_tp_ranks(family, tmp_path):
    per_rank = run_check(2, tmp_path, "parity", family)
    assert all(r["bit_equal_across_tp"] for rank in per_rank for r in rank)
    rows = per_rank[0]
    at_gain_1 = [r for r in rows if r["logit_scale"] == 1.0]  # the random init's logits (gain 3 is reported only)
    assert [(r["layout"].split()[0], r["fp32_lm_head"], bool(r["overrides"])) for r in at_gain_1] == [
        ("TP2+SP", False, False),
        ("TP2+SP", True, False),
        ("TP2+SP", False, True),
        ("TP1", False, False),
        ("TP1", False, True),
    ], at_gain_1
    # Rounding where HF rounds (RoPE and SwiGLU unfused) and without TP's bf16 partial sums, the engine is HF to
    # within 1e-2: measured on 2xH200 0.0075 dense, 0.0067 MoE (EP2).
    hf_rounding = at_gain_1[-1]
    assert hf_rounding["cosine"] >= 0.99 and hf_rounding["mean_abs_diff"] <= 1e-2, hf_rounding
    # Every other row is held to HF's own bf16 error (x1.25), ~0.012 from the exact (fp32) value of the same
    # weights: TE's fused RoPE and SwiGLU compute in fp32 and TP2 adds bf16 partial sums, so those rows differ from
    # HF by about as much as either differs from exact (TP2+SP measured 0.0127 dense, 0.0138 MoE; unfused 0.0105,
    # 0.0114; TP1 0.0126, 0.0124).
    floor = at_gain_1[0]["hf_bf16_vs_fp32_mean_abs_diff"]
    for row in at_gain_1:
        assert row["cosine"] >= 0.99 and row["mean_abs_diff"] <= 1.25 * floor, row
        assert row["vs_fp32_cosine"] >= 0.99 and row["vs_fp32_mean_abs_diff"] <= 1.25 * floor, row


def test_packed_and_context_parallel_match_padded_in_bf16(tmp_path):
    """THD packing at CP1 and CP2 (the 2*CP split, TransformerEngine's bf16 THD attention) against padded rows; LoRA
    at CP2 against LoRA padded at CP1."""
    result = run_check(2, tmp_path, "cp")[0]
    for case in result["bf16"]:
        assert case["ranks_equal"], case
        # bf16 noise, not a misplaced token: the same model's bf16 forward is ~0.012 from its fp32 value (parity
        # check); measured on 2xH200: packed CP1 0-0.004, CP2 0.011 (max 0.047), loss and grad norm within 1e-4
        assert case["cosine"] >= 0.99999 and case["log_prob_mean_abs_diff"] <= 0.015, case
        (loss1, loss2), (norm1, norm2) = case["loss"], case["grad_norm"]
        assert abs(loss1 - loss2) <= 1e-3 * abs(loss1) and abs(norm1 - norm2) <= 1e-3 * norm1, case
    [lora] = [case for case in result["bf16"] if "LoRA" in case["case"]]  # the adapters' gradients, over CP too
    assert lora["grad_norm"][0] > 0, lora
    fp32 = result["fp32_packed"]  # packing runs in fp32 at CP1 (THD); it equals padded rows
    assert isinstance(fp32, dict) and fp32["log_prob_max_abs_diff"] <= 1e-3, fp32


def test_offload_frees_its_bytes_and_keeps_the_step(tmp_path):
    result = run_check(1, tmp_path, "offload")[0]
    for name, freed in result["freed"].items():
        assert freed["fraction"] >= 0.9, (name, freed)
    assert result["cycled"] == result["plain"] and result["flagged"] == result["plain"], result
    assert not result["flagged_params_on_device_between_steps"]
