"""actor_rollout_ref.actor.megatron: the actor's parallel layout, dtype, memory knobs and TransformerConfig overrides
(the reference and the critic reuse its layout)."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.config.schema.spec import NON_NEGATIVE_INT, POSITIVE_INT, Dir, Section, key
from dagrl.utils import precision


@dataclass(frozen=True)
class Megatron(Section):
    """parallel layout and memory knobs; ref reuses the layout"""

    tensor_model_parallel_size: int = key(1, "TP: shards each layer over this many GPUs", POSITIVE_INT)
    pipeline_model_parallel_size: int = key(1, "PP: splits the layers into this many stages", POSITIVE_INT)
    virtual_pipeline_model_parallel_size: int | None = key(
        None, "VPP: model chunks per pipeline stage (interleaved 1F1B)", POSITIVE_INT
    )
    context_parallel_size: int = key(1, "CP: splits each sequence over this many GPUs", POSITIVE_INT)
    expert_model_parallel_size: int = key(1, "EP: spreads MoE experts over this many GPUs", POSITIVE_INT)
    expert_tensor_parallel_size: int | None = key(
        None, "TP inside each expert; null = tensor_model_parallel_size", POSITIVE_INT
    )
    sequence_parallel: bool = key(
        False, "shard activations along the sequence in TP regions (off with a warning when TP=1)"
    )
    use_distributed_optimizer: bool = key(False, "shard optimizer state over data-parallel ranks (ZeRO-1)")
    param_dtype: str = key(
        "float32",
        "parameter dtype: float32 | bfloat16 (bf16 keeps fp32 main params) | auto "
        "(bfloat16 on a GPU or a CPU with bf16 instructions, else float32)",
        choices=precision.CHOICES,
    )
    param_offload: bool = key(False, "keep actor parameters on the host outside the phases that use them")
    grad_offload: bool = key(False, "keep gradient buffers on the host between updates")
    optimizer_offload: bool = key(False, "keep optimizer state on the host between updates")
    use_dist_checkpointing: bool = key(
        False,
        "start actor and ref from the Megatron checkpoint at dist_checkpointing_path, not model.path's safetensors",
    )
    dist_checkpointing_path: Dir | None = key(
        None, "a Megatron torch_dist dir, e.g. RUN/global_step_N/actor (config, tokenizer still from model.path)"
    )
    seed: int = key(42, "model init / dropout seed", NON_NEGATIVE_INT)
    use_deterministic_algorithms: bool = key(
        False,
        "the same batch gives the same log-probs and gradients, run after run (AReaL's key; verl's nearest is "
        "+...override_transformer_config.deterministic_mode=true): TransformerConfig deterministic_mode with "
        "cross_entropy_loss_fusion, bias_dropout_fusion and tp_comm_overlap off, torch.use_deterministic_algorithms, "
        "and at launch CUBLAS_WORKSPACE_CONFIG=:4096:8 NCCL_ALGO=Ring NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 (values "
        "already set must be deterministic ones); costs speed: Ring all-reduces, TransformerEngine's deterministic "
        "attention backward, no fused cross entropy",
    )
    override_transformer_config: dict = key(
        {}, "extra TransformerConfig fields, e.g. +...override_transformer_config.recompute_method=uniform"
    )
