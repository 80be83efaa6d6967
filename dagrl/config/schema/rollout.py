"""The rollout section: each key's type, default, range, choices and doc (conf/rollout/default.yaml is written from
it); and the declarations of actor_rollout_ref.rollout's FP8 keys (quantization, fp8_scales, kv_cache_dtype;
docs/fp8.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dagrl.config.schema.spec import POSITIVE_INT, Section, key

QUANTIZATIONS = (None, "fp8")
FP8_SCALES = ("auto", "block", "tensor")
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3")


@dataclass(frozen=True)
class RolloutPool(Section):
    """The rollout pool of a run with separate pools (actor_rollout_ref.hybrid_engine=false; verl's fully-async
    `rollout` section). It takes the first rollout.nnodes x rollout.n_gpus_per_node processes of the launch; the
    training pool (trainer.nnodes x trainer.n_gpus_per_node) takes the rest. Ignored by colocated runs."""

    nnodes: int = key(1, "machines of the rollout pool", POSITIVE_INT)
    n_gpus_per_node: int = key(1, "rollout processes per machine (GPUs; CPU slots on a CPU run)", POSITIVE_INT)


def quantization_key() -> Any:
    """actor_rollout_ref.rollout.quantization (verl's name and values)."""
    return key(
        None,
        "vLLM: null = the rollout dtype | fp8 = FP8 weights (scales: fp8_scales; dynamic activations) quantized "
        "at each sync, served by vLLM's FP8 kernels (Hopper or newer; docs/fp8.md); needs a TIS or MIS correction",
        choices=QUANTIZATIONS,
    )


def fp8_scales_key() -> Any:
    """actor_rollout_ref.rollout.fp8_scales: the FP8 weights' scale layout (dagrl/engine/rollout/fp8.py)."""
    return key(
        "auto",
        "quantization=fp8's weight scales: block = one per 128x128 block | tensor = one per weight matrix "
        "(coarser: its largest entry sets every entry's scale) | auto = block where every width per rollout TP rank "
        "is in whole 128-blocks, else tensor",
        choices=FP8_SCALES,
    )


def kv_cache_dtype_key() -> Any:
    """actor_rollout_ref.rollout.kv_cache_dtype (vLLM's engine argument of that name)."""
    return key(
        "auto",
        "vLLM: the KV cache's dtype: auto = the model's | fp8, fp8_e4m3 = FP8 (half the memory, scales 1.0: "
        "a bf16 checkpoint carries no calibrated ones)",
        choices=KV_CACHE_DTYPES,
    )
