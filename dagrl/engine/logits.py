"""fp32 logits of bf16 operands: the LM head of `actor_rollout_ref.model.fp32_lm_head`, shared by the Megatron
engine's output layer (dagrl/engine/megatron/lm_head.py) and the HF rollout."""
from __future__ import annotations

import torch


class _Fp32Logits(torch.autograd.Function):
    """fp32 logits of bf16 (or fp32) operands; bf16 gradients back to both."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(hidden, weight)
        if hidden.is_cuda and hidden.dtype in (torch.bfloat16, torch.float16):
            flat = hidden.reshape(-1, hidden.shape[-1])  # one GEMM with an fp32 epilogue: no fp32 weight copy
            return torch.mm(flat, weight.t(), out_dtype=torch.float32).view(*hidden.shape[:-1], -1)
        return hidden.float() @ weight.float().t()  # exact products of bf16 values, fp32 sums: the same numbers

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, weight = ctx.saved_tensors
        grad = grad.to(hidden.dtype)
        grad_hidden = grad @ weight
        grad_weight = grad.reshape(-1, grad.shape[-1]).t() @ hidden.reshape(-1, hidden.shape[-1])
        return grad_hidden, grad_weight.to(weight.dtype)


def fp32_logits(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return _Fp32Logits.apply(hidden, weight)
