"""The verdict line for each way the pairs can read (docs/numerics.md's table), from findings built by hand."""

from __future__ import annotations

import pytest

from dagrl.doctor.numerics import Diagnosis, PairGap
from dagrl.doctor.report import metrics, render, verdict
from dagrl.doctor.weights import WeightCheck

FLOOR = 0.03


def diagnosis(actor: float, rollout: float, between: float, differing: dict[str, float] | None = None) -> Diagnosis:
    weights = WeightCheck("unused", tied=False, compare=False, max_diff={"model.norm.weight": 0.0, **(differing or {})})
    pairs = [
        PairGap("actor_vs_hf", "actor (bf16) vs HF fp32", actor, 4 * actor, FLOOR),
        PairGap("rollout_vs_hf", "rollout (bf16) vs HF fp32", rollout, 4 * rollout, FLOOR),
        PairGap("rollout_vs_actor", "rollout vs actor", between, 4 * between, 2 * FLOOR),
    ]
    return Diagnosis({"bf16": FLOOR}, pairs, weights, notes=["the VLLMRollout's hidden states are not compared"])


@pytest.mark.parametrize(
    ("found", "says"),
    [
        (
            diagnosis(0.03, 0.05, 0.04),
            "the weights map exactly; the remaining gap is the floor (actor 1.0x, rollout 1.7x",
        ),
        (
            diagnosis(0.03, 0.9, 0.9, {"model.layers.3.mlp.up_proj.weight": 0.5}),
            "the actor matches HF but the rollout parts from it after the weight sync: the export or the rollout's "
            "loader maps model.layers.3.mlp.up_proj.weight wrongly",
        ),
        (diagnosis(0.1, 0.1, 0.3), "the actor and the rollout each match HF within the floor but not each other"),
        (
            diagnosis(0.03, 0.03, 0.03, {"model.embed_tokens.weight": 1e-3}),
            "the log-probs agree, but the export differs from the checkpoint in 1 tensors",
        ),
    ],
)
def test_the_verdict_reads_the_pairs(found, says):
    assert verdict(found).startswith(says), verdict(found)
    text = render(found, "TP1 PP1 VPP1 CP1 EP1, vllm rollout")
    assert text.splitlines()[-1] == f"verdict: {verdict(found)}"
    assert "note: the VLLMRollout's hidden states are not compared" in text
    assert metrics(found)["doctor/ok"] == float(found.ok)
    assert metrics(found)["doctor/floor_bf16"] == FLOOR
