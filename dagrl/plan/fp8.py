"""When FP8 rollout (actor_rollout_ref.rollout.quantization=fp8) is expected to be slower than bf16.

A decode step reads every linear weight once for the whole batch in flight; FP8 halves those bytes, but it also
quantizes each linear layer's activations, token by token, before its FP8 matmul: work that grows with the tokens in
flight, not with the weights. So FP8 pays where the weight bytes per GPU are large against the per-token work, and
costs where they are small. What is measured is two points, no more (dagrl's vLLM rollout, vLLM 0.26.0, one H100,
dummy weights, block scales on CUTLASS's block GEMM, 64 prompts x 4, 1,024 tokens forced, 3 calls each): FP8 at
0.96x bf16's tokens/s on the Qwen3-1.7B shape and 1.10x on the Qwen3-8B shape (docs/fp8.md). The rule below is those
two points, read as a threshold on the quantized linear weights one rollout GPU holds: at or below the 1.7B shape's,
slower; at or above the 8B shape's, faster; between them a log-linear interpolation of the two ratios, said as such.
benchmarks/rollout.py --compare bf16,fp8 measures a shape itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dagrl.models.families import FAMILIES
from dagrl.plan.model import ModelShape
from dagrl.plan.presets import config_fields

# (Qwen3 preset size, FP8 tokens/s over bf16's) as measured; the smaller model first
MEASURED = (("1.7b", 0.96), ("8b", 1.10))
MEASURED_TYPE = next(f.model_type for f in FAMILIES.values() if f.config_class == "Qwen3Config")
BASIS = "dagrl's vLLM rollout, vLLM 0.26.0, one H100, dummy weights, block scales, 64 prompts x 4, 1,024 tokens forced"


def quantized_params(shape: ModelShape, rollout_tp: int = 1) -> float:
    """The linear weights FP8 quantizes on one rollout GPU: every decoder layer's attention projections, MLP and
    experts, over the rollout TP (embeddings, the LM head, norms and routers stay in bf16)."""
    return shape.layers * (shape.layer_tp_sharded() + shape.layer_experts()) / rollout_tp


@dataclass(frozen=True)
class Point:
    size: str
    params: float
    ratio: float


def measured_points() -> list[Point]:
    return [
        Point(
            size,
            quantized_params(ModelShape.from_hf({"model_type": MEASURED_TYPE, **config_fields(MEASURED_TYPE, size)})),
            r,
        )
        for size, r in MEASURED
    ]


def expected_ratio(params: float) -> tuple[float, str]:
    """(FP8 tokens/s over bf16's, how it was had) for `params` quantized weights per GPU: a measured point's
    ratio at or beyond it, else the log-linear interpolation between the two."""
    low, high = measured_points()
    if params <= low.params:
        return low.ratio, (
            f"at or below the Qwen3-{low.size} shape's {low.params / 1e9:.2f}B, where FP8 measured {low.ratio:.2f}x "
            f"bf16's tokens/s"
        )
    if params >= high.params:
        return high.ratio, (
            f"at or above the Qwen3-{high.size} shape's {high.params / 1e9:.2f}B, where FP8 measured "
            f"{high.ratio:.2f}x bf16's tokens/s"
        )
    share = math.log(params / low.params) / math.log(high.params / low.params)
    ratio = low.ratio + share * (high.ratio - low.ratio)
    return ratio, (
        f"about {ratio:.2f}x, interpolated between {low.ratio:.2f}x measured at {low.params / 1e9:.2f}B and "
        f"{high.ratio:.2f}x at {high.params / 1e9:.2f}B (break-even near {break_even() / 1e9:.2f}B): a guess between "
        f"two measurements, not a model"
    )


def break_even() -> float:
    """Where the log-linear interpolation of the two measured ratios crosses 1.0."""
    low, high = measured_points()
    return low.params * (high.params / low.params) ** ((1 - low.ratio) / (high.ratio - low.ratio))


def fp8_rollout_lines(shape: ModelShape, rollout_tp: int) -> list[str]:
    """The plan's section for actor_rollout_ref.rollout.quantization=fp8."""
    params = quantized_params(shape, rollout_tp)
    ratio, how = expected_ratio(params)
    verdict = "expected SLOWER than bf16" if ratio < 1 else "expected faster than bf16"
    advice = (
        ": keep bf16 unless FP8 is wanted for memory (its KV cache room), not speed"
        if ratio < 1
        else " (the weights a decode step reads outweigh FP8's per-token activation quantization)"
    )
    return [
        "FP8 rollout (actor_rollout_ref.rollout.quantization=fp8)",
        f"  {params / 1e9:.2f}B quantized linear weights per rollout GPU (rollout TP {rollout_tp}): {verdict}{advice}",
        f"  {how}",
        f"  measured: {BASIS}; benchmarks/rollout.py --compare bf16,fp8 measures this shape",
    ]
