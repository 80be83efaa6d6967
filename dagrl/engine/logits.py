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


def hf_response_log_probs(model: torch.nn.Module, batch, fp32_head: bool) -> torch.Tensor:
    """An HF causal LM's log-probs of `batch`'s response tokens (rows × response length, padding included): the
    reference the GPU parity checks and benchmarks/log_prob_gap.py measure against. With `fp32_head` the LM head
    runs in fp32 on the model's own-dtype hidden states; without, in the model's dtype."""
    response = batch["responses"].shape[1]
    with torch.no_grad():
        hidden = model.model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).last_hidden_state[:, -response - 1 : -1]
        weight = model.lm_head.weight
        logits = fp32_logits(hidden, weight) if fp32_head else (hidden @ weight.t()).float()
    return torch.log_softmax(logits, -1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)
