"""The doctor with an FP8 rollout, on CPU: the FP8 floor's model (the sync's round trip on exactly the tensors it
quantizes, in a dense and an MoE family), the export's comparison within the FP8 rounding, and the whole check
with an hf rollout that loads the FP8 round trip of what the sync sends (vLLM's FP8 path does not run on CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dagrl.doctor import fp8
from dagrl.doctor.numerics import FACTOR, gap
from dagrl.doctor.probe import Probe, hf_log_probs, load_hf
from dagrl.doctor.report import render, verdict
from dagrl.doctor.weights import checkpoint_names, fp8_rounding
from dagrl.engine.megatron.weights import SafetensorsDir
from dagrl.engine.rollout import fused_experts
from dagrl.engine.rollout.fp8 import is_quantized, quantized_by_name
from tests.doctor.planted import PLANTS
from tests.doctor.test_numerics import doctor, model_dir

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    return {family: model_dir(tmp_path_factory.mktemp(family), family) for family in ("llama", "qwen3_moe")}


def probe_of(vocab: int) -> Probe:
    ids = torch.randint(0, vocab, (4, 16), generator=torch.Generator().manual_seed(0))
    return Probe(input_ids=ids, prompt_length=8, rollout_log_probs=torch.zeros(4, 8))


@pytest.mark.parametrize(("family", "scales"), [("llama", "block"), ("qwen3_moe", "tensor")])
def test_the_fp8_floor_rounds_exactly_the_tensors_the_sync_quantizes(models, family, scales):
    path = str(models[family])
    plain = load_hf(path, torch.bfloat16, CPU)
    model = load_hf(path, torch.bfloat16, CPU)
    replaced = fp8.round_trip_model(model, path, scales, torch.float32)
    source = SafetensorsDir(path)
    shapes = {name: source.get(name).shape for name in checkpoint_names(path)}
    assert sorted(replaced) == sorted(name for name, shape in shapes.items() if is_quantized(name, shape))
    assert any(".experts." in name for name in replaced) == (family == "qwen3_moe")
    params, before = dict(model.named_parameters()), dict(plain.named_parameters())
    targets = set()
    for name in replaced:  # each one holds its round trip, in the model's dtype
        target = params.get(name)
        if target is None:
            fused_name, _, _, target = fused_experts.slot(params, name)
            targets.add(fused_name)
        else:
            targets.add(name)
        want = fp8.round_trip(source.get(name).float(), scales).to(torch.bfloat16)
        assert torch.equal(target, want), name
    for name, param in params.items():  # and nothing else moved
        assert torch.equal(param, before[name]) != (name in targets), name
    probe = probe_of(model.config.vocab_size)
    reference = hf_log_probs(load_hf(path, torch.float32, CPU), probe)[0]
    bf16_floor = gap(hf_log_probs(plain, probe)[0], reference)[0]
    fp8_floor = gap(hf_log_probs(model, probe)[0], reference)[0]
    assert 0 < bf16_floor < fp8_floor < float("inf"), (bf16_floor, fp8_floor)


@pytest.mark.parametrize("scales", ["block", "tensor"])
def test_the_export_is_compared_within_the_fp8_rounding(scales):
    weight = torch.randn(200, 300, generator=torch.Generator().manual_seed(0)) * 0.02
    weight[3, 5], weight[150, 250] = 8.0, 2e-5  # an outlier: values far below it land in e4m3's subnormals
    worst, share = fp8_rounding(weight.bfloat16(), weight.bfloat16().float(), scales)
    assert 0 < worst and share <= 1.0
    swapped = weight.clone()
    swapped[:100], swapped[100:] = weight[100:200], weight[:100]  # gate and up exchanged
    assert fp8_rounding(swapped, weight, scales)[1] > 1.0
    nudged = weight.clone()
    nudged[7, 7] *= 1.25  # one entry off by more than FP8 rounds
    assert fp8_rounding(nudged, weight, scales)[1] > 1.0


def fp8_doctor(path: Path, scales: str):
    """The doctor with an hf rollout in bf16 that loads the FP8 round trip of each tensor the sync quantizes: the
    weights an FP8 rollout computes with (its activations are not quantized)."""
    from dagrl.engine.rollout.hf import HFRollout

    load_weights = HFRollout.load_weights

    def rounded(self, buckets, version=0):
        trip = ([(n, fp8.round_trip(t, scales) if is_quantized(n, t.shape) else t) for n, t in b] for b in buckets)
        return load_weights(self, trip, version)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(HFRollout, "load_weights", rounded)
        return doctor(path, rollout_dtype=torch.bfloat16, fp8_layout=scales)


def test_an_fp8_rollout_is_held_to_the_fp8_floor(models):
    diagnosis = fp8_doctor(models["llama"], "block")
    text = render(diagnosis, "TP1")
    assert set(diagnosis.floors) == {"fp32", "fp8"} and diagnosis.floors["fp8"] > 100 * diagnosis.floors["fp32"]
    pairs = {pair.key: pair for pair in diagnosis.pairs}
    assert (pairs["actor_vs_hf"].floor, pairs["actor_vs_hf"].factor) == (diagnosis.floors["fp32"], FACTOR)
    assert (pairs["rollout_vs_hf"].floor, pairs["rollout_vs_hf"].factor) == (diagnosis.floors["fp8"], fp8.FACTOR)
    assert pairs["rollout_vs_actor"].floor == diagnosis.floors["fp32"] + diagnosis.floors["fp8"]
    # the rollout computes with the floor model's weights: at the FP8 floor, far past the fp32 one
    assert pairs["rollout_vs_hf"].ratio == pytest.approx(1.0, rel=0.05), text
    assert pairs["rollout_vs_hf"].mean > FACTOR * diagnosis.floors["fp32"], text
    weights = diagnosis.weights
    assert sorted(weights.rounded) == sorted(n for n in weights.max_diff if quantized_by_name(n))
    # the FP8 weights differ from the checkpoint by their rounding, and within it
    assert weights.exact and 0 < max(weights.max_diff.values()) and max(weights.rounded.values()) <= 1.0, text
    assert diagnosis.ok, text
    assert verdict(diagnosis).startswith("the weights map exactly (the FP8 ones within their rounding)"), text
    assert "x the fp8 floor, a finding past 6x)" in text and "fp8 floor: HF in the rollout's dtype" in text


def test_an_export_error_shows_through_the_fp8_rounding(models, monkeypatch):
    PLANTS["export_gate_up"](monkeypatch)
    diagnosis = fp8_doctor(models["llama"], "block")
    text = render(diagnosis, "TP1")
    assert not diagnosis.ok, text
    assert {name for name, _ in diagnosis.weights.differing} == {
        "model.layers.1.mlp.gate_proj.weight",
        "model.layers.1.mlp.up_proj.weight",
    }, text
    assert "model.layers.1.mlp.gate_proj.weight: max abs difference" in text
    # past the FP8 floor's factor; the rollout's layers are compared with the FP8 floor model's, whose own gap at
    # each stage is large on a random model, so the verdict names the export's tensors rather than a stage
    assert not diagnosis.pairs[0].exceeds and diagnosis.pairs[1].exceeds, text
    assert "rollout: first stage past 6x its floor:" in text
    assert verdict(diagnosis).startswith("the actor matches HF but the rollout parts from it"), text
    assert "maps model.layers.1.mlp.up_proj.weight, model.layers.1.mlp.gate_proj.weight wrongly" in verdict(diagnosis)
