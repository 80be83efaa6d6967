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


FP8_FLOOR = 0.12


def fp8_diagnosis(rollout: float, rounded: float = 0.9) -> Diagnosis:
    """An FP8 rollout's figures: the actor held to the bf16 floor at 4x, the rollout's pairs to the FP8 one at 6x."""
    from dagrl.doctor import fp8

    name = "model.layers.0.mlp.up_proj.weight"
    weights = WeightCheck(
        "unused", tied=False, compare=False, max_diff={"model.norm.weight": 0.0, name: 0.01}, fp8_layout="block"
    )
    weights.rounded[name] = rounded
    held = {"factor": fp8.FACTOR}
    pairs = [
        PairGap("actor_vs_hf", "actor (bf16) vs HF fp32", 0.03, 0.1, FLOOR, held_to="bf16"),
        PairGap(
            "rollout_vs_hf",
            "rollout (bf16, fp8 block scales) vs HF fp32",
            rollout,
            1.0,
            FP8_FLOOR,
            held_to="fp8",
            **held,
        ),
        PairGap("rollout_vs_actor", "rollout vs actor", rollout, 1.0, FLOOR + FP8_FLOOR, held_to="bf16 + fp8", **held),
    ]
    return Diagnosis({"bf16": FLOOR, "fp8": FP8_FLOOR}, pairs, weights)


def test_an_fp8_rollout_is_held_to_its_own_floor():
    """4x the FP8 floor (16x the bf16 one) is within it; 7x is a finding; an FP8 weight past its rounding too."""
    within = fp8_diagnosis(4 * FP8_FLOOR)
    assert within.ok and within.weights.exact, render(within, "TP1")
    assert verdict(within).startswith(
        "the weights map exactly (the FP8 ones within their rounding); the remaining gap is the floor (actor 1.0x "
        "the bf16 floor, rollout 4.0x the fp8 floor; a finding starts at 4x, 6x for the FP8 rollout's pairs)"
    )
    text = render(within, "TP1 PP1 VPP1 CP1 EP1, vllm rollout (fp8)")
    assert "floor (HF in the dtype vs HF fp32; fp32: vs fp64): bf16 0.03, fp8 0.12\n" in text
    assert "(1.0x the bf16 floor, a finding past 4x)\n" in text and "past the floor" not in text
    assert "of which 1 FP8 weights as their round trip: at most 0.90 of the rounding" in text
    assert metrics(within)["doctor/floor_fp8"] == FP8_FLOOR
    past = fp8_diagnosis(7 * FP8_FLOOR)
    assert not past.ok and verdict(past).startswith("the actor matches HF but the rollout parts from it")
    assert "(7.0x the fp8 floor, a finding past 6x)  <- past the floor" in render(past, "TP1")
    beyond = fp8_diagnosis(FP8_FLOOR, rounded=3.0)
    assert not beyond.ok and beyond.weights.differing == [("model.layers.0.mlp.up_proj.weight", 0.01)]
    assert verdict(beyond).startswith("the log-probs agree, but the export differs from the checkpoint in 1 tensors")
