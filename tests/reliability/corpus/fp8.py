from __future__ import annotations

from tests.reliability.corpus.case import MEGATRON, STARTUP, Case

TOPIC = "FP8 (actor_rollout_ref.rollout.quantization, override_transformer_config.fp8)"
QUANTIZATION = "actor_rollout_ref.rollout.quantization"
CASES: tuple[Case, ...] = (
    Case(
        "fp8_rollout_with_hf",
        "an FP8 rollout with the `hf` rollout (transformers' generate has no FP8 kernels)",
        (f"{QUANTIZATION}=fp8",),
        (f"{QUANTIZATION}=fp8", "set actor_rollout_ref.rollout.name=vllm"),
    ),
    Case(
        "fp8_rollout_unknown_format",
        "a quantization vLLM's rollout here does not offer (`int4`)",
        (f"{QUANTIZATION}=int4",),
        (f"{QUANTIZATION}='int4'", "fp8"),
    ),
    Case(
        "fp8_kv_cache_with_hf",
        "an FP8 KV cache with the `hf` rollout",
        ("actor_rollout_ref.rollout.kv_cache_dtype=fp8",),
        ("actor_rollout_ref.rollout.kv_cache_dtype", "set actor_rollout_ref.rollout.name=vllm"),
    ),
    Case(
        "fp8_training_on_cpu",
        "FP8 training (`override_transformer_config.fp8=hybrid`) on a CPU run",
        (f"+{MEGATRON}.override_transformer_config.fp8=hybrid",),
        (f"{MEGATRON}.override_transformer_config.fp8=hybrid", "a CPU run", "drop +"),
        found=STARTUP,
    ),
)
