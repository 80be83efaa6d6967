from __future__ import annotations

from tests.reliability.corpus.case import LOG_PROBS, MEGATRON, STARTUP, Case

TOPIC = "FP8 (actor_rollout_ref.rollout.quantization, override_transformer_config.fp8)"
QUANTIZATION = "actor_rollout_ref.rollout.quantization"
SCALES = "actor_rollout_ref.rollout.fp8_scales"
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
        "fp8_block_scales_off_the_blocks",
        "`fp8_scales=block` on a model whose widths are not in whole 128-blocks (SmolLM2-135M's q width 576, here "
        "the tiny model's 64): vLLM's block layers cannot split them",
        (
            "actor_rollout_ref.rollout.name=vllm",
            f"{QUANTIZATION}=fp8",
            f"{SCALES}=block",
            "actor_rollout_ref.actor.tis_imp_ratio_cap=2",
            LOG_PROBS,
        ),
        (f"{SCALES}=block", "q width 64", f"set {SCALES}=tensor"),
        # a machine of the CPU suite has no vLLM: pre-flight says so too, as a second, independent line
        also=(("actor_rollout_ref.rollout.name=vllm but vLLM is not installed",),),
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
