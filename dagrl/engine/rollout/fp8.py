"""FP8 rollout weights: the actor's bf16/fp32 linear weights quantized to float8_e4m3fn with one scale per 128x128
block (DeepSeek-V3's layout, verl's `rollout.quantization=fp8`), as vLLM's Fp8LinearMethod / Fp8MoEMethod load them
from a block-FP8 checkpoint: `<module>.weight` (FP8) beside `<module>.weight_scale_inv` (float32,
[ceil(rows/128), ceil(cols/128)]; the weight is `fp8 * scale_inv` blockwise).

Pure torch, no vLLM import: the quantization, the names, the engine arguments and the re-bucketing of the sync's
stream are tested on CPU (torch has float8_e4m3fn there). fp8_vllm.py is the part that touches vLLM's layers.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Iterator

import torch
import torch.nn.functional as F

from dagrl.engine.rollout.interface import WeightBucket
from dagrl.models.families import FAMILIES

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # the largest finite float8_e4m3fn
BLOCK = 128
# A block of zeros (a pruned row, a fresh LoRA-merged slice) would divide by 0; DeepSeek-V3's reference quantizer
# floors the amax at the same value.
AMAX_FLOOR = 1e-4
SCALE_SUFFIX = "_scale_inv"  # `<module>.weight` -> `<module>.weight_scale_inv`, as FP8 checkpoints name it
# vLLM's Fp8Config for a bf16 checkpoint: FP8 layers with block scales, activations quantized per token group at
# run time (dynamic), so no calibration data is needed
QUANTIZATION_CONFIG = {
    "quant_method": "fp8",
    "fmt": "e4m3",
    "activation_scheme": "dynamic",
    "weight_block_size": [BLOCK, BLOCK],
}

# The linear layers vLLM builds with the FP8 method, by their HF names' last module: attention (separate or fused
# qkv), the MLP (separate or fused gate_up) and every MoE family's expert projections (Mixtral's w1/w2/w3). Never
# embeddings, norms, lm_head, a router gate (`mlp.gate`, `shared_expert_gate`: vLLM builds those unquantized) or a
# bias.
QUANTIZED_MODULES = frozenset(
    {"q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "gate_proj", "up_proj", "down_proj", "gate_up_proj"}
    | {name for kind in FAMILIES.values() if kind.moe for name in kind.expert_names}
)


def is_quantized(name: str, shape: tuple[int, ...] | torch.Size) -> bool:
    """Whether the HF tensor `name` of `shape` goes to vLLM as FP8 weight + block scale."""
    module, _, kind = name.rpartition(".")
    return kind == "weight" and len(shape) == 2 and module.rpartition(".")[2] in QUANTIZED_MODULES


def scale_shape(shape: tuple[int, ...] | torch.Size, block: int = BLOCK) -> tuple[int, ...]:
    """The block-scale tensor of a weight of `shape`: partial blocks at the edges get a scale of their own."""
    *lead, rows, cols = shape
    return (*lead, math.ceil(rows / block), math.ceil(cols / block))


def quantize_blockwise(weight: torch.Tensor, block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """(float8_e4m3fn weight of weight's shape, float32 scale_inv of `scale_shape`), with each block's
    scale_inv = max(amax, AMAX_FLOOR) / 448: its largest entry lands on FP8's largest value. Edge blocks are padded
    with zeros, which change no amax, and cropped after."""
    *lead, rows, cols = weight.shape
    block_rows, block_cols = scale_shape(weight.shape, block)[-2:]
    padded = F.pad(weight.float(), (0, block_cols * block - cols, 0, block_rows * block - rows))
    blocks = padded.reshape(*lead, block_rows, block, block_cols, block)
    scale_inv = blocks.abs().amax(dim=(-3, -1)).clamp(min=AMAX_FLOOR) / FP8_MAX
    quantized = (blocks / scale_inv[..., :, None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    quantized = quantized.reshape(*lead, block_rows * block, block_cols * block)[..., :rows, :cols]
    return quantized.contiguous(), scale_inv


def dequantize_blockwise(quantized: torch.Tensor, scale_inv: torch.Tensor, block: int = BLOCK) -> torch.Tensor:
    """float32 `quantized * scale_inv`, each scale over its block (what vLLM's block-FP8 GEMM multiplies by)."""
    rows, cols = quantized.shape[-2:]
    expanded = scale_inv.repeat_interleave(block, dim=-2).repeat_interleave(block, dim=-1)[..., :rows, :cols]
    return quantized.float() * expanded


def quantized_tensors(name: str, tensor: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """What the sync sends for one HF tensor: its FP8 weight and block scale, or the tensor itself."""
    if not is_quantized(name, tensor.shape):
        return [(name, tensor)]
    weight, scale_inv = quantize_blockwise(tensor)
    return [(name, weight), (name + SCALE_SUFFIX, scale_inv)]


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def quantized_buckets(buckets: Iterable[WeightBucket], bucket_bytes: int) -> Iterator[WeightBucket]:
    """The sync's stream with every quantizable tensor as FP8 weight + block scale, re-bucketed by the bytes the
    rollout receives (about half the bf16 stream's: a bucket holds about twice the tensors, the loader runs half
    as often). A tensor over `bucket_bytes` is a bucket of its own, as in the export."""
    bucket: WeightBucket = []
    size = 0
    for incoming in buckets:
        for name, tensor in incoming:
            for out_name, out in quantized_tensors(name, tensor):
                if bucket and size + nbytes(out) > bucket_bytes:
                    yield bucket
                    bucket, size = [], 0
                bucket.append((out_name, out))
                size += nbytes(out)
    if bucket:
        yield bucket


def engine_kwargs(quantization: str | None, kv_cache_dtype: str, hf_overrides: dict[str, Any]) -> dict[str, Any]:
    """LLM(...) arguments of an FP8 engine: `quantization_config` written over the bf16 checkpoint's config.json
    (hf_overrides, merged with `hf_overrides` already set), so vLLM builds block-FP8 layers whose first weights come
    from the first sync; the KV cache's dtype. Nothing for quantization=None and kv_cache_dtype=auto."""
    kwargs: dict[str, Any] = {}
    if quantization == "fp8":
        kwargs["quantization"] = "fp8"
        kwargs["hf_overrides"] = {**hf_overrides, "quantization_config": dict(QUANTIZATION_CONFIG)}
    if kv_cache_dtype != "auto":
        kwargs["kv_cache_dtype"] = kv_cache_dtype
    return kwargs
