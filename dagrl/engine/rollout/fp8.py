"""FP8 rollout weights: the actor's bf16/fp32 linear weights quantized to float8_e4m3fn on their way into vLLM,
as vLLM's Fp8LinearMethod / Fp8MoEMethod load them from a serialized FP8 checkpoint, in one of two scale layouts
(actor_rollout_ref.rollout.fp8_scales):
  block   one scale per 128x128 block (DeepSeek-V3's layout, verl's `rollout.quantization=fp8`): `<module>.weight`
          (FP8) beside `<module>.weight_scale_inv` (float32, [ceil(rows/128), ceil(cols/128)]), with
          `weight_block_size: [128, 128]` in the quantization_config;
  tensor  one scale per weight matrix: `<module>.weight` beside `<module>.weight_scale` (float32, [1]), with no
          `weight_block_size` (vLLM's loaders put each q/k/v or gate/up matrix's scale in its shard's slot and
          requantize the fused layer to their maximum after loading).
The weight is `fp8 * scale`, each scale over its block (the whole matrix being one block in the tensor layout).

Pure torch, no vLLM import: the quantization, the names, the engine arguments and the re-bucketing of the sync's
stream are tested on CPU (torch has float8_e4m3fn there). fp8_vllm.py is the part that touches vLLM's layers.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Iterator

import torch
import torch.nn.functional as F

from dagrl.config.model_dir import read_hf_config
from dagrl.config.preflight.fp8 import scale_layout
from dagrl.engine.rollout.interface import WeightBucket
from dagrl.models.families import FAMILIES

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # the largest finite float8_e4m3fn
BLOCK = 128
# A block of zeros (a pruned row, a fresh LoRA-merged slice) would divide by 0; DeepSeek-V3's reference quantizer
# floors the amax at the same value.
AMAX_FLOOR = 1e-4
# `<module>.weight` -> its scale's name, per layout (what vLLM's Fp8LinearMethod registers in each)
SCALE_SUFFIXES = {"block": "_scale_inv", "tensor": "_scale"}
# vLLM's Fp8Config over a bf16 checkpoint: FP8 layers whose weights and scales come from the sync, activations
# quantized at run time (dynamic: per token group with blocks, per token otherwise), so no calibration data
QUANTIZATION_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic"}
BLOCK_SIZE = {"block": [BLOCK, BLOCK], "tensor": None}  # the config's weight_block_size per layout

# The linear layers the sync sends as FP8, by their HF names' last module: attention (separate or fused qkv), the
# MLP (separate or fused gate_up) and every MoE family's expert projections (Mixtral's w1/w2/w3). Never embeddings,
# norms, lm_head, a bias or a router gate (`<moe_block>.gate`, `shared_expert_gate`): a router's logits pick the
# experts, and FP8 rounding there would move the rollout's routing away from the actor's (DeepSeek-V3's FP8
# checkpoint keeps its gates in bf16 too). vLLM builds some routers with the FP8 method (Qwen3-MoE's `mlp.gate`), so
# the engine is told to leave them unquantized (`ignored_layers`, below).
QUANTIZED_MODULES = frozenset(
    {"q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "gate_proj", "up_proj", "down_proj", "gate_up_proj"}
    | {name for kind in FAMILIES.values() if kind.moe for name in kind.expert_names}
)


def quantized_by_name(name: str) -> bool:
    """Whether the HF tensor `name` is the weight of a layer vLLM builds with the FP8 method (its shape unread: a
    caller that has only names picks the tensors worth reading)."""
    module, _, kind = name.rpartition(".")
    return kind == "weight" and module.rpartition(".")[2] in QUANTIZED_MODULES


def is_quantized(name: str, shape: tuple[int, ...] | torch.Size) -> bool:
    """Whether the HF tensor `name` of `shape` goes to vLLM as FP8 weight + scale."""
    return len(shape) == 2 and quantized_by_name(name)


def _block(shape: tuple[int, ...] | torch.Size, layout: str, block: int) -> tuple[int, int]:
    """A scale's block: block x block, or the whole matrix."""
    return (block, block) if layout == "block" else (shape[-2], shape[-1])


def scale_shape(shape: tuple[int, ...] | torch.Size, layout: str = "block", block: int = BLOCK) -> tuple[int, ...]:
    """The scale tensor of a weight of `shape`: partial blocks at the edges get a scale of their own; one scale,
    [1], per matrix in the tensor layout (as per-tensor FP8 checkpoints hold it)."""
    *lead, rows, cols = shape
    if layout == "tensor":
        return (*lead, 1)
    return (*lead, math.ceil(rows / block), math.ceil(cols / block))


def quantize(weight: torch.Tensor, layout: str = "block", block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """(float8_e4m3fn weight of weight's shape, float32 scale of `scale_shape`), with each block's
    scale = max(amax, AMAX_FLOOR) / 448: its largest entry lands on FP8's largest value. Edge blocks are padded
    with zeros, which change no amax, and cropped after."""
    *lead, rows, cols = weight.shape
    block_rows, block_cols = _block(weight.shape, layout, block)
    count_rows, count_cols = math.ceil(rows / block_rows), math.ceil(cols / block_cols)
    padded = F.pad(weight.float(), (0, count_cols * block_cols - cols, 0, count_rows * block_rows - rows))
    blocks = padded.reshape(*lead, count_rows, block_rows, count_cols, block_cols)
    scale = blocks.abs().amax(dim=(-3, -1)).clamp(min=AMAX_FLOOR) / FP8_MAX
    quantized = (blocks / scale[..., :, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    quantized = quantized.reshape(*lead, count_rows * block_rows, count_cols * block_cols)[..., :rows, :cols]
    return quantized.contiguous(), scale.reshape(scale_shape(weight.shape, layout, block))


def dequantize(quantized: torch.Tensor, scale: torch.Tensor, layout: str = "block", block: int = BLOCK) -> torch.Tensor:
    """float32 `quantized * scale`, each scale over its block (what vLLM's FP8 GEMM multiplies by)."""
    rows, cols = quantized.shape[-2:]
    block_rows, block_cols = _block(quantized.shape, layout, block)
    grid = scale.reshape(*scale.shape[:-1], 1, 1) if layout == "tensor" else scale
    expanded = grid.repeat_interleave(block_rows, dim=-2).repeat_interleave(block_cols, dim=-1)[..., :rows, :cols]
    return quantized.float() * expanded


def quantized_tensors(name: str, tensor: torch.Tensor, layout: str = "block") -> list[tuple[str, torch.Tensor]]:
    """What the sync sends for one HF tensor: its FP8 weight and scale, or the tensor itself."""
    if not is_quantized(name, tensor.shape):
        return [(name, tensor)]
    weight, scale = quantize(tensor, layout)
    return [(name, weight), (name + SCALE_SUFFIXES[layout], scale)]


def scale_shape_of(name: str, shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...] | None:
    """The shape of `name` if it is an FP8 scale (either layout's) of a quantized weight in `shapes`, else None."""
    for layout, suffix in SCALE_SUFFIXES.items():
        weight = name.removesuffix(suffix)
        if weight != name and weight in shapes and is_quantized(weight, shapes[weight]):
            return scale_shape(shapes[weight], layout)
    return None


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def quantized_buckets(
    buckets: Iterable[WeightBucket], bucket_bytes: int, layout: str = "block"
) -> Iterator[WeightBucket]:
    """The sync's stream with every quantizable tensor as FP8 weight + scale, re-bucketed by the bytes the
    rollout receives (about half the bf16 stream's: a bucket holds about twice the tensors, the loader runs half
    as often). A tensor over `bucket_bytes` is a bucket of its own, as in the export."""
    bucket: WeightBucket = []
    size = 0
    for incoming in buckets:
        for name, tensor in incoming:
            for out_name, out in quantized_tensors(name, tensor, layout):
                if bucket and size + nbytes(out) > bucket_bytes:
                    yield bucket
                    bucket, size = [], 0
                bucket.append((out_name, out))
                size += nbytes(out)
    if bucket:
        yield bucket


def resolved_layout(choice: str, quantization: str | None, model_path: str, rollout_tp: int) -> str:
    """actor_rollout_ref.rollout.fp8_scales as the model's widths per rollout TP rank resolve it (`auto`: block
    where they take 128-blocks, else tensor); config.json is read only for an FP8 rollout on `auto`."""
    if quantization != "fp8" or choice != "auto":
        return "block" if choice == "auto" else choice
    return scale_layout(choice, read_hf_config(model_path), rollout_tp)


def engine_env(quantization: str | None, layout: str) -> dict[str, str]:
    """Environment an FP8 engine of `layout` starts with (the user's own values win). Block scales: vLLM picks
    DeepGEMM's block GEMM where its wheel carries DeepGEMM, which JIT-compiles its kernels with nvcc at the first
    forward (an image without the CUDA toolkit fails there: "NVCC compilation failed") and may repack the block
    scales after each load, which an in-place sync cannot follow; CUTLASS's block GEMM reads the loaded layout and
    needs no compiler."""
    return {"VLLM_USE_DEEP_GEMM": "0"} if quantization == "fp8" and layout == "block" else {}


def router_gates(hf_config: dict) -> list[str]:
    """Every decoder layer's router gate in vLLM's prefixes (`model.layers.<i>.<moe_block>.gate`) for an MoE
    family's config.json, else none. vLLM's Fp8Config skips a layer only on its full prefix, so each is named; a
    layer without a router has no such prefix and the name matches nothing."""
    kind = FAMILIES.get(hf_config.get("model_type"))  # type: ignore[arg-type]
    if kind is None or not kind.moe:
        return []
    return [f"model.layers.{i}.{kind.moe_block}.gate" for i in range(hf_config["num_hidden_layers"])]


def engine_kwargs(
    quantization: str | None,
    kv_cache_dtype: str,
    hf_overrides: dict[str, Any],
    layout: str = "block",
    hf_config: dict | None = None,
) -> dict[str, Any]:
    """LLM(...) arguments of an FP8 engine: `quantization_config` written over the bf16 checkpoint's config.json
    (hf_overrides, merged with `hf_overrides` already set), so vLLM builds FP8 layers of `layout`'s scales whose
    first weights come from the first sync, with the routers of `hf_config`'s model left in bf16 (as the sync
    sends them); the KV cache's dtype. Nothing for quantization=None and kv_cache_dtype=auto."""
    kwargs: dict[str, Any] = {}
    if quantization == "fp8":
        config = dict(QUANTIZATION_CONFIG)
        if BLOCK_SIZE[layout] is not None:  # without it vLLM's Fp8Config reads the checkpoint as per-tensor
            config["weight_block_size"] = list(BLOCK_SIZE[layout])
        if gates := router_gates(hf_config or {}):
            config["ignored_layers"] = gates
        kwargs["quantization"] = "fp8"
        kwargs["hf_overrides"] = {**hf_overrides, "quantization_config": config}
    if kv_cache_dtype != "auto":
        kwargs["kv_cache_dtype"] = kv_cache_dtype
    return kwargs
