"""Log-probs and entropy of vocab-parallel logits, without gathering the vocabulary.

Each TP rank holds logits for a contiguous slice of the (padded) vocabulary. The max, the sum of exponentials, the
target's logit and the entropy's sum are reduced over the TP group as plain tensors; the backward needs no
communication, since the gradient of log p(target) (and of the entropy) with respect to this rank's logits is a
function of this rank's softmax slice and the reduced scalars only.

One autograd Function rather than a chain of elementwise ops: autograd would keep an fp32 copy of the logits per
op and make one full-vocabulary pass per op and per gradient (about ten passes of [tokens, V] fp32 per micro-batch);
here the forward leaves the softmax in one fp32 buffer, which the backward turns into the gradient in place, as
Megatron's own vocab-parallel cross-entropy does.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _tp():
    from megatron.core import parallel_state as ps

    return (
        ps.get_tensor_model_parallel_rank(),
        ps.get_tensor_model_parallel_world_size(),
        ps.get_tensor_model_parallel_group(),
    )


class _VocabParallelLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx, logits: torch.Tensor, targets: torch.Tensor, vocab_size: int, inv_temperature: float, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tp_rank, tp_size, group = _tp()
        shard = logits.shape[-1]
        start = tp_rank * shard
        flat = logits.reshape(-1, shard)
        x = flat.to(torch.float32, copy=True)  # logits / T in a fresh fp32 buffer: the caller's stay untouched
        if inv_temperature != 1.0:
            x.mul_(inv_temperature)
        if start + shard > vocab_size:  # this slice holds padding rows Megatron adds: out of the softmax
            x[:, max(vocab_size - start, 0) :] = float("-inf")
        shift = x.amax(dim=-1)
        if tp_size > 1:
            dist.all_reduce(shift, op=dist.ReduceOp.MAX, group=group)
        x.sub_(shift.unsqueeze(-1))  # x - max: every exponent <= 0
        local_target = targets.reshape(-1) - start
        in_shard = (local_target >= 0) & (local_target < shard)
        local_target = local_target.clamp(0, shard - 1)
        picked = torch.where(in_shard, x.gather(-1, local_target.unsqueeze(-1)).squeeze(-1), 0.0)
        if with_entropy:  # sum_v e^(x_v) x_v as a batched dot product: no [tokens, V] temporary
            p = torch.exp(x)
            finite = x.masked_fill_(x == float("-inf"), 0.0) if start + shard > vocab_size else x
            sums = [p.sum(dim=-1), picked, torch.bmm(p.unsqueeze(1), finite.unsqueeze(2)).reshape(-1)]
        else:  # the exponentials overwrite x: one [tokens, V] buffer in all
            p = x.exp_()
            sums = [p.sum(dim=-1), picked]
        del x
        reduced = torch.stack(sums)
        if tp_size > 1:
            dist.all_reduce(reduced, group=group)
        sum_exp = reduced[0]
        log_sum_exp = torch.log(sum_exp)
        log_probs = reduced[1] - log_sum_exp
        p.div_(sum_exp.unsqueeze(-1))  # this rank's slice of the softmax
        entropy = log_sum_exp - reduced[2] / sum_exp if with_entropy else log_probs.new_zeros(())
        ctx.save_for_backward(p, local_target, in_shard, entropy)
        ctx.inv_temperature, ctx.dtype, ctx.shape = inv_temperature, logits.dtype, logits.shape
        return log_probs.view(targets.shape), entropy.view(targets.shape) if with_entropy else entropy

    @staticmethod
    def backward(ctx, grad_log_probs: torch.Tensor, grad_entropy: torch.Tensor):
        # d log p_t / dx_v = [v = t] - p_v;  dH / dx_v = -p_v (log p_v + H)   (x = logits / T)
        p, local_target, in_shard, entropy = ctx.saved_tensors
        g_lp = grad_log_probs.reshape(-1, 1).float()
        if entropy.dim():
            g_h = grad_entropy.reshape(-1, 1).float()
            grad = torch.special.xlogy(p, p).mul_(g_h)  # p log p, 0 where p = 0
            grad.addcmul_(p, g_lp + g_h * entropy.unsqueeze(-1)).neg_()
        else:
            grad = p.mul_(-g_lp)  # the softmax buffer is not needed again: reused for the gradient
        rows = torch.arange(len(local_target), device=grad.device)
        grad[rows, local_target] += torch.where(in_shard, g_lp.squeeze(-1), 0.0)
        if ctx.inv_temperature != 1.0:
            grad.mul_(ctx.inv_temperature)
        return grad.to(ctx.dtype).view(ctx.shape), None, None, None, None


def vocab_parallel_log_probs(
    logits: torch.Tensor, targets: torch.Tensor, vocab_size: int, with_entropy: bool, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits [..., V/tp] (this rank's vocab slice), targets [...] global ids; the softmax is that of
    logits / `temperature`.

    Returns float32 log p(target) [...] and, if asked, the entropy [...]. Vocab rows >= `vocab_size` (padding
    Megatron adds) are excluded from the softmax."""
    log_probs, entropy = _VocabParallelLogProbs.apply(logits, targets, vocab_size, 1.0 / temperature, with_entropy)
    return log_probs, (entropy if with_entropy else None)
