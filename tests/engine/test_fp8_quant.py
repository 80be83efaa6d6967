"""The FP8 rollout's weight math and names (dagrl/engine/rollout/fp8.py): blockwise and per-tensor float8_e4m3fn
against hand values, which HF tensors are quantized and what each scale layout sends, the sync's re-bucketing by FP8
bytes, the engine arguments, the manifest's scales."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from dagrl.engine.rollout import fp8
from dagrl.models.families import FAMILIES
from tests.engine.tiny_models import make_model_dir
from dagrl.engine.rollout.weight_manifest import WeightManifest


def test_hand_values_quantize_exactly_with_one_scale_per_block():
    weight = torch.tensor([[1.0, 2.0, 3.0], [4.0, 8.0, 0.0], [0.0, 0.0, 0.0]])
    quantized, scale_inv = fp8.quantize(weight, block=2)
    assert quantized.dtype == torch.float8_e4m3fn and quantized.shape == (3, 3)
    assert scale_inv.dtype == torch.float32 and scale_inv.shape == (2, 2)  # edge blocks keep a scale of their own
    floor = fp8.AMAX_FLOOR / 448
    assert torch.allclose(scale_inv, torch.tensor([[8 / 448, 3 / 448], [floor, floor]]))
    # each block's largest entry lands on 448, the rest in proportion (56 = 448/8, all representable in e4m3)
    assert quantized.float().tolist() == [[56.0, 112.0, 448.0], [224.0, 448.0, 0.0], [0.0, 0.0, 0.0]]
    assert torch.equal(fp8.dequantize(quantized, scale_inv, block=2), weight)


def test_random_weights_round_trip_within_e4m3_precision():
    torch.manual_seed(0)
    weight = torch.randn(300, 200, dtype=torch.bfloat16) * torch.logspace(-3, 1, 200)  # columns of every scale
    quantized, scale_inv = fp8.quantize(weight)
    assert scale_inv.shape == fp8.scale_shape(weight.shape) == (3, 2)
    error = (fp8.dequantize(quantized, scale_inv) - weight.float()).abs()
    # e4m3 keeps 3 mantissa bits: an entry is off by at most 1/16 of itself, and never more than its block allows
    assert (error <= weight.float().abs() / 16 + scale_inv.max() * 2**-9).all()
    block_amax = weight.float()[:128, :128].abs().max()
    assert scale_inv[0, 0] == pytest.approx(float(block_amax) / 448, rel=1e-6)


def test_a_zero_block_does_not_divide_by_zero():
    quantized, scale_inv = fp8.quantize(torch.zeros(4, 4))
    assert torch.isfinite(scale_inv).all() and (scale_inv > 0).all()
    assert not quantized.float().any() and not fp8.dequantize(quantized, scale_inv).any()


def test_per_tensor_hand_values_take_one_scale_for_the_matrix():
    weight = torch.tensor([[1.0, -2.0, 0.25], [4.0, 8.0, 0.5]])
    quantized, scale = fp8.quantize(weight, "tensor")
    assert scale.dtype == torch.float32 and scale.shape == (1,) == fp8.scale_shape(weight.shape, "tensor")
    assert scale.item() == pytest.approx(8 / 448)  # the matrix's largest entry sets every entry's step
    # 56 = 448/8: every entry lands on an e4m3 value exactly
    assert quantized.float().tolist() == [[56.0, -112.0, 14.0], [224.0, 448.0, 28.0]]
    assert torch.equal(fp8.dequantize(quantized, scale, "tensor"), weight)
    # 3 -> 168, halfway between e4m3's 160 and 176: to the even one, 160 (2.857 once scaled back)
    rounded, _ = fp8.quantize(torch.tensor([[3.0, 8.0]]), "tensor")
    assert rounded.float().tolist() == [[160.0, 448.0]]
    # coarser than blocks: an outlier elsewhere in the matrix scales a block of small entries down into e4m3's
    # subnormals (2e-5 * 448/8 = 0.0011, whose nearest e4m3 value is 2^-9 = 0.00195): 75% off, not 1/16 at most
    mixed = torch.cat([torch.full((128, 128), 2e-5), torch.full((128, 128), 8.0)], dim=1)
    for layout, worst in (("block", 1 / 16), ("tensor", 1.0)):
        error = (fp8.dequantize(*fp8.quantize(mixed, layout), layout) - mixed)[:, :128].abs().max() / 2e-5
        assert error <= worst and (layout == "block" or error > 0.7)
    zeros, floor = fp8.quantize(torch.zeros(4, 4), "tensor")
    assert floor.item() == pytest.approx(fp8.AMAX_FLOOR / 448) and not zeros.float().any()


@pytest.mark.parametrize(
    "name,shape,quantized",
    [
        ("model.layers.0.self_attn.q_proj.weight", (64, 64), True),
        ("model.layers.0.self_attn.qkv_proj.weight", (96, 64), True),
        ("model.layers.0.mlp.gate_up_proj.weight", (256, 64), True),
        ("model.layers.0.mlp.down_proj.weight", (64, 128), True),
        ("model.layers.0.mlp.experts.7.up_proj.weight", (32, 64), True),
        ("model.layers.0.block_sparse_moe.experts.0.w1.weight", (32, 64), True),  # Mixtral's expert names
        ("model.layers.0.mlp.shared_expert.gate_proj.weight", (32, 64), True),
        ("model.layers.0.mlp.gate.weight", (8, 64), False),  # the router
        ("model.layers.0.block_sparse_moe.gate.weight", (8, 64), False),
        ("model.layers.0.mlp.shared_expert_gate.weight", (1, 64), False),
        ("model.layers.0.self_attn.q_proj.bias", (64,), False),
        ("model.layers.0.input_layernorm.weight", (64,), False),
        ("model.layers.0.self_attn.q_norm.weight", (16,), False),
        ("model.embed_tokens.weight", (1000, 64), False),
        ("lm_head.weight", (1000, 64), False),
    ],
)
def test_only_the_linear_layers_vllm_quantizes(name, shape, quantized):
    assert fp8.is_quantized(name, shape) is quantized
    assert fp8.quantized_by_name(name) is quantized  # every name above is of its layer's own shape
    if quantized:  # by name alone, the shape unread: a stacked (3-D) tensor of the same name is sent as it is
        assert fp8.quantized_by_name(name) and not fp8.is_quantized(name, (2, *shape))
    for layout, scale_name, scale_shape in (
        ("block", name + "_scale_inv", fp8.scale_shape(shape) if quantized else None),
        ("tensor", name + "_scale", (1,)),  # the name and shape vLLM's per-tensor loaders take
    ):
        sent = fp8.quantized_tensors(name, torch.ones(shape, dtype=torch.bfloat16), layout)
        assert [n for n, _ in sent] == ([name, scale_name] if quantized else [name])
        if quantized:
            assert sent[0][1].dtype == torch.float8_e4m3fn and sent[0][1].shape == shape
            assert sent[1][1].dtype == torch.float32 and tuple(sent[1][1].shape) == scale_shape


def test_the_stream_is_rebucketed_by_the_bytes_it_sends():
    q = torch.randn(256, 256, dtype=torch.bfloat16)  # 128 KiB in bf16, 64 KiB + 16 B in FP8
    norm = torch.ones(256, dtype=torch.bfloat16)
    incoming = [
        [(f"model.layers.{i}.self_attn.q_proj.weight", q), (f"model.layers.{i}.input_layernorm.weight", norm)]
        for i in range(4)
    ]
    sizes = {"bf16": sum(fp8.nbytes(t) for bucket in incoming for _, t in bucket)}
    out = list(fp8.quantized_buckets(iter(incoming), bucket_bytes=140 << 10))
    sizes["fp8"] = sum(fp8.nbytes(t) for bucket in out for _, t in bucket)
    assert [sum(fp8.nbytes(t) for _, t in bucket) <= 140 << 10 for bucket in out] == [True, True]
    assert len(out) == 2  # four bf16 buckets of 128.5 KiB became two of about 129 KiB
    assert sizes["fp8"] == 4 * (256 * 256 + 2 * 2 * 4 + 512) and sizes["fp8"] / sizes["bf16"] < 0.51
    names = [name for bucket in out for name, _ in bucket]
    assert names[:3] == [
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.q_proj.weight_scale_inv",
        "model.layers.0.input_layernorm.weight",
    ]
    weight, scale = out[0][0][1], out[0][1][1]
    assert weight.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32
    assert torch.equal(weight.view(torch.uint8), fp8.quantize(q)[0].view(torch.uint8))
    assert out[0][2][1] is norm  # what is not quantized travels as it came
    big = list(fp8.quantized_buckets(iter(incoming[:1]), bucket_bytes=1))
    assert [len(bucket) for bucket in big] == [1, 1, 1]  # a tensor over the size: its own bucket
    # per-tensor: one 4-byte scale a matrix, the same bucketing by the bytes sent
    out = list(fp8.quantized_buckets(iter(incoming), bucket_bytes=140 << 10, layout="tensor"))
    assert sum(fp8.nbytes(t) for bucket in out for _, t in bucket) == 4 * (256 * 256 + 4 + 512) and len(out) == 2
    assert [name for name, _ in out[0][:2]] == [
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.q_proj.weight_scale",
    ]
    assert torch.equal(out[0][1][1], fp8.quantize(q, "tensor")[1])


def test_engine_arguments():
    assert fp8.engine_kwargs(None, "auto", {}) == {}  # null: the engine exactly as before
    kwargs = fp8.engine_kwargs("fp8", "fp8_e4m3", {"head_dtype": "float32"})
    assert kwargs == {
        "quantization": "fp8",
        "hf_overrides": {
            "head_dtype": "float32",
            "quantization_config": {
                "quant_method": "fp8",
                "fmt": "e4m3",
                "activation_scheme": "dynamic",
                "weight_block_size": [128, 128],
            },
        },
        "kv_cache_dtype": "fp8_e4m3",
    }
    assert fp8.engine_kwargs(None, "fp8", {}) == {"kv_cache_dtype": "fp8"}
    # per-tensor: no weight_block_size, which vLLM's Fp8Config reads as one scale per weight (per fused shard)
    tensor = fp8.engine_kwargs("fp8", "auto", {}, "tensor")
    assert tensor == {
        "quantization": "fp8",
        "hf_overrides": {"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic"}},
    }


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_linear_of_a_layer_is_sent_in_fp8_or_left_in_bf16_by_the_engine_too(family, tmp_path):
    """vLLM builds every linear layer with the FP8 method unless the quantization config ignores it (Qwen3-MoE's
    router among them), and then waits for an FP8 weight and its scale. So each 2-D weight of a decoder layer in
    the checkpoint is either quantized by the sync or named in `ignored_layers`, never both: the routers, and only
    they, stay bf16."""
    make_model_dir(tmp_path, family=family, num_layers=2)
    config = json.loads((tmp_path / "config.json").read_text())
    ignored = fp8.engine_kwargs("fp8", "auto", {}, "block", config)["hf_overrides"]["quantization_config"]
    ignored = set(ignored.get("ignored_layers", []))
    with safe_open(tmp_path / "model.safetensors", "pt") as saved:
        shapes = {name: saved.get_slice(name).get_shape() for name in saved.keys()}
    matrices = [n for n, shape in shapes.items() if n.startswith("model.layers.") and len(shape) == 2]
    assert matrices
    for name in matrices:
        assert fp8.is_quantized(name, (8, 8)) != (name.removesuffix(".weight") in ignored), name
    routers = {n.removesuffix(".weight") for n in matrices if n.endswith(".gate.weight")}
    assert ignored == routers and (bool(routers) == FAMILIES[family].moe)


def test_the_manifest_takes_each_weights_scale_in_either_layout():
    manifest = WeightManifest(
        "/models/m", {"model.layers.0.mlp.down_proj.weight": (300, 200), "model.norm.weight": (200,)}
    )
    manifest.check("model.layers.0.mlp.down_proj.weight", torch.zeros(300, 200, dtype=torch.float8_e4m3fn))
    manifest.check("model.layers.0.mlp.down_proj.weight_scale_inv", torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"weight_scale_inv has shape \(2, 2\).*\(3, 2\)"):
        manifest.check("model.layers.0.mlp.down_proj.weight_scale_inv", torch.zeros(2, 2))
    with pytest.raises(KeyError, match="model.norm.weight_scale_inv"):
        manifest.check("model.norm.weight_scale_inv", torch.zeros(1, 2))
    manifest.check("model.layers.0.mlp.down_proj.weight_scale", torch.zeros(1))  # a per-tensor scale
    with pytest.raises(ValueError, match=r"weight_scale has shape \(3, 2\).*\(1,\)"):
        manifest.check("model.layers.0.mlp.down_proj.weight_scale", torch.zeros(3, 2))
    with pytest.raises(KeyError, match="model.norm.weight_scale"):
        manifest.check("model.norm.weight_scale", torch.zeros(1))


def test_engine_environment():
    # block scales: CUTLASS's block GEMM (no nvcc at run time, the loaded scale layout kept), unless the user chose
    assert fp8.engine_env("fp8", "block") == {"VLLM_USE_DEEP_GEMM": "0"}
    assert fp8.engine_env("fp8", "tensor") == {}
    assert fp8.engine_env(None, "block") == {}
