"""Log-probs and entropy of vocab-parallel logits, without gathering the vocabulary.

Each TP rank holds logits for a contiguous slice of the (padded) vocabulary. The log-sum-exp, the target's logit
and the entropy's sum are reduced over the TP group; the reductions' backward is the identity, which is right
because every TP rank computes the same replicated loss from them.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def _reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region
    return reduce_from_tensor_model_parallel_region(tensor)


def vocab_parallel_log_probs(logits: torch.Tensor, targets: torch.Tensor, vocab_size: int,
                             with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits [..., V/tp] (this rank's vocab slice, already divided by temperature), targets [...] global ids.

    Returns float32 log p(target) [...] and, if asked, the entropy [...]. Vocab rows >= `vocab_size` (padding
    Megatron adds) are excluded from the softmax."""
    from megatron.core import parallel_state as ps

    logits = logits.float()
    tp_rank, tp_size = ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_world_size()
    shard = logits.shape[-1]
    start = tp_rank * shard
    if start + shard > vocab_size:  # this slice holds padding rows
        valid = torch.arange(start, start + shard, device=logits.device) < vocab_size
        logits = logits.masked_fill(~valid, float("-inf"))
    # The max only stabilises the exponentials; log-sum-exp's gradient does not depend on it.
    shift = logits.detach().amax(dim=-1, keepdim=True)
    if tp_size > 1:
        dist.all_reduce(shift, op=dist.ReduceOp.MAX, group=ps.get_tensor_model_parallel_group())
    sum_exp = torch.exp(logits - shift).sum(dim=-1, keepdim=True)
    if tp_size > 1:
        sum_exp = _reduce_sum(sum_exp)
    log_z = shift + torch.log(sum_exp)                                   # [..., 1]

    local_target = targets - start
    in_shard = (local_target >= 0) & (local_target < shard)
    picked = torch.gather(logits, -1, local_target.clamp(0, shard - 1).unsqueeze(-1)).squeeze(-1)
    picked = torch.where(in_shard, picked, torch.zeros_like(picked))
    if tp_size > 1:
        picked = _reduce_sum(picked)
    log_probs = picked - log_z.squeeze(-1)

    entropy = None
    if with_entropy:
        # H = log Z - sum_v p_v x_v, with sum_v p_v x_v = (sum_v e^(x_v - shift) x_v) / sum_exp. Written through the
        # two reduced sums only, so that every term depending on log Z is replicated on all TP ranks (a local
        # softmax term would give each rank only its own slice's share of the gradient through log Z).
        weighted = (torch.exp(logits - shift) * torch.nan_to_num(logits, neginf=0.0)).sum(dim=-1, keepdim=True)
        if tp_size > 1:
            weighted = _reduce_sum(weighted)
        entropy = (log_z - weighted / sum_exp).squeeze(-1)
    return log_probs, entropy
