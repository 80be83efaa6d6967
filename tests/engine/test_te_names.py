"""The HF mapping covers the TransformerEngine spec's parameter names, checked on CPU against the names and shard
shapes recorded from the GPU model (tests/engine/fixtures/te_names_*.json; fused norms, grouped-GEMM experts)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from dagrl.engine.megatron.hf_config import padded_vocab_size
from dagrl.engine.megatron.weights import Rule, layer_rule, model_rule
from engine_helpers import per_expert_names
from tiny_models import load_hf, make_model_dir

FIXTURES = Path(__file__).parent / "fixtures"
# fixture -> (family, TP, EP) of the layout it was recorded at (rank 0: TP rank 0, EP rank 0)
CASES = {"te_names_qwen3_tp2.json": ("qwen3", 2, 1), "te_names_qwen3_moe_ep2.json": ("qwen3_moe", 1, 2)}


def shard_shape(rule: Rule, hf_shapes: list[torch.Size], tp: int, vocab: int) -> tuple[int, ...]:
    """The shape of TP rank 0's Megatron shard of the HF tensors under `rule` (expert TP is 1 here)."""
    size = 1 if rule.expert else tp
    first = hf_shapes[0]
    if rule.kind == "copy":
        return tuple(first)
    if rule.kind == "col":
        return (first[0], first[1] // size)
    if rule.kind == "vocab":
        return (padded_vocab_size(vocab, tp) // size, *first[1:])
    rows = sum(shape[0] for shape in hf_shapes)  # row, qkv (q+k+v heads), fc1 ([gate; up])
    return (rows // size, *first[1:])


@pytest.mark.parametrize("fixture", sorted(CASES))
def test_every_te_parameter_maps_to_hf_tensors_of_the_recorded_shard_shape(fixture, tmp_path):
    family, tp, ep = CASES[fixture]
    recorded = json.loads((FIXTURES / fixture).read_text())["names"]
    model = load_hf(make_model_dir(tmp_path / family, family, num_layers=4, seed=3))
    hf = {name: t.shape for name, t in per_expert_names(model.state_dict()).items()}
    experts_per_rank = getattr(model.config, "num_experts", 0) // ep
    assert any("layer_norm_weight" in n for n in recorded)  # really the TE spec's names
    covered = set()
    for name, shape in recorded.items():
        layer = re.match(r"^decoder\.layers\.(\d+)\.(.+)$", name)
        rule = model_rule(name, tied=False) if layer is None else layer_rule(layer.group(2), int(layer.group(1)), 0)
        assert rule is not None
        missing = [n for n in rule.hf_names if n not in hf]
        assert not missing, (name, missing)
        expected = shard_shape(rule, [hf[n] for n in rule.hf_names], tp, model.config.vocab_size)
        assert tuple(shape) == expected, (name, shape, expected)
        covered.update(rule.hf_names)
    # rank 0 holds the first `experts_per_rank` experts of each layer and every non-expert tensor
    expected_cover = {
        n
        for n in hf
        if not re.search(r"\.experts\.(\d+)\.", n)
        or int(re.search(r"\.experts\.(\d+)\.", n).group(1)) < experts_per_rank
    }
    if model.config.tie_word_embeddings:
        expected_cover.discard("lm_head.weight")
    assert covered == expected_cover, covered ^ expected_cover
