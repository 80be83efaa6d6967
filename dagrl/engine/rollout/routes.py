"""The hf rollout's record of MoE routes (actor_rollout_ref.rollout.enable_rollout_routing_replay): the top-k experts
each decoder layer's router chose for every token the model ran, during generation itself (the prefill and every
decode step), for the actor to replay (dagrl/engine/megatron/router_replay.py).

The batch gets `routed_experts` [B, P + R, layers, top_k] int16, one entry per column of `input_ids` (left-padded
prompt, right-padded response): the route of that token as the model's input. -1 where there is none: padding,
and each response's last token, which is sampled but never fed back (its output would predict past the response,
so no log-prob reads it)."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch


class RouteRecorder:
    """Forward hooks on the routers of `model` (transformers >= 5's TopKRouter modules, `mlp.gate`, which return
    (logits, scores, indices)), one per decoder layer, in layer order."""

    def __init__(self, model: torch.nn.Module) -> None:
        layers = model.model.layers
        self.routers = [layer.mlp.gate for layer in layers if hasattr(getattr(layer.mlp, "gate", None), "top_k")]
        if len(self.routers) != len(layers):
            raise ValueError(
                "actor_rollout_ref.rollout.enable_rollout_routing_replay=true needs a model whose every decoder "
                "layer is routed (qwen3_moe): set it to false"
            )
        self.top_k = self.routers[0].top_k
        self.calls: list[list[torch.Tensor]] = []  # per model forward: each layer's [tokens, k] indices

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Records every forward inside the block (one entry of `calls` per forward of the whole model)."""
        self.calls = []

        def hook(layer: int):
            def record(module: torch.nn.Module, args: tuple, output: tuple) -> None:
                if layer == 0:
                    self.calls.append([])
                self.calls[-1].append(output[2].to(torch.int16).cpu())

            return record

        handles = [router.register_forward_hook(hook(i)) for i, router in enumerate(self.routers)]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def routes(self, shared_prefill: int, first: int, width: int, attention_mask: torch.Tensor) -> torch.Tensor:
        """The recorded forwards as `routed_experts` [B, width, layers, k] (B = attention_mask's rows).

        `shared_prefill`: the first forward ran each prompt once for its `shared_prefill` samples (1: no shared
        prefill); `first`: the input_ids column the forwards' first token sits at (left-padding columns no row
        used were cut); `attention_mask` [B, width]: the batch's, -1 wherever it is 0."""
        rows = attention_mask.shape[0]
        per_call = []
        for index, call in enumerate(self.calls):
            prompts = rows // shared_prefill if index == 0 else rows
            step = torch.stack(call, dim=1)  # [tokens, layers, k]
            step = step.view(prompts, -1, *step.shape[1:])
            per_call.append(step.repeat_interleave(shared_prefill, dim=0) if index == 0 else step)
        recorded = torch.cat(per_call, dim=1)[:, : width - first]
        out = torch.full((rows, width, len(self.routers), self.top_k), -1, dtype=torch.int16)
        out[:, first : first + recorded.shape[1]] = recorded
        out[attention_mask == 0] = -1
        return out
