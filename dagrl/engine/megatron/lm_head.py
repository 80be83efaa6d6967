"""The LM head in fp32 (`actor_rollout_ref.model.fp32_lm_head`): logits of bf16 hidden states and bf16 weights,
accumulated and kept in fp32 instead of rounded to bf16.

Rounding the logits to bf16 is the largest single source of the rollout/train log-prob gap (MiniMax-M1, ScaleRL):
at logits of ~20 a bf16 step is 0.125. vLLM computes the same fp32 logits with `hf_overrides.head_dtype=float32`,
so with the flag both sides agree up to the layers' own bf16 noise. The backward is unchanged (the gradient reaching
the head is rounded to bf16 as in Megatron's own path), and it only replaces the output layer's matmul: the tensor-
and sequence-parallel communication around it is Megatron's.
"""

from __future__ import annotations

import functools

import torch

from dagrl.engine.logits import fp32_logits


def _output_forward(
    layer, input_: torch.Tensor, weight: torch.Tensor | None = None, runtime_gather_output: bool | None = None
) -> tuple[torch.Tensor, None]:
    """ColumnParallelLinear.forward of the output layer (no bias, vocab-parallel output) with fp32 logits."""
    from megatron.core.tensor_parallel.mappings import (
        copy_to_tensor_model_parallel_region,
        gather_from_sequence_parallel_region,
    )

    weight = layer.weight if weight is None else weight  # tied embeddings pass the embedding's weight
    if layer.sequence_parallel:  # all-gather the sequence shards; the backward reduce-scatters
        hidden = gather_from_sequence_parallel_region(input_, True, group=layer.tp_group)
    else:  # identity; the backward all-reduces the input gradient over TP
        hidden = copy_to_tensor_model_parallel_region(input_, group=layer.tp_group)
    if runtime_gather_output:
        raise ValueError("fp32_lm_head keeps the logits vocab-parallel; a gathered output was asked for")
    return fp32_logits(hidden, weight), None


def use_fp32_lm_head(modules: list[torch.nn.Module]) -> None:
    """Make the output layer of the last pipeline stage's model chunk(s) produce fp32 logits."""
    for module in modules:
        layer = getattr(module, "output_layer", None)
        if getattr(module, "post_process", False) and layer is not None:
            if layer.gather_output or layer.bias is not None:
                raise ValueError("fp32_lm_head expects Megatron's bias-free, vocab-parallel output layer")
            layer.forward = functools.partial(_output_forward, layer)
