"""The rollout's record of MoE routes (actor_rollout_ref.rollout.enable_rollout_routing_replay): the top-k experts
each decoder layer's router chose for every token the model ran, during generation itself (the prefill and every
decode step), for the actor to replay (dagrl/engine/megatron/router_replay.py). `RouteRecorder` records them in the
hf rollout; `place` lays out what vLLM returns (enable_return_routed_experts).

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


def place(per_sequence: list, attention_mask: torch.Tensor) -> torch.Tensor:
    """Routes an engine returns per sequence, in the order the model ran the tokens (the prompt's, then each
    response token fed back: vLLM's `CompletionOutput.routed_experts` [tokens, layers, k]), as `routed_experts`
    [B, width, layers, k] in the layout above: the i-th route goes to the i-th column `attention_mask` [B, width]
    holds (the left-padded prompt's, then the response's); columns past the routes an
    engine returned (each response's last token) and padding are -1."""
    if len(per_sequence) != attention_mask.shape[0]:
        raise RuntimeError(
            f"the rollout returned routes for {len(per_sequence)} sequences, expected {attention_mask.shape[0]}"
        )
    if any(routes is None for routes in per_sequence):
        raise RuntimeError("the rollout returned no routes for a sequence: was it started with route recording?")
    first = torch.as_tensor(per_sequence[0])
    out = torch.full((*attention_mask.shape, *first.shape[1:]), -1, dtype=torch.int16)
    for row, routes in enumerate(per_sequence):
        routes = torch.as_tensor(routes).to(torch.int16)
        columns = attention_mask[row].nonzero().flatten()
        count = min(len(routes), len(columns))
        if count < len(columns) - 1:  # one route short at most: the last token, sampled but never run
            raise RuntimeError(f"the rollout returned {len(routes)} routes for a sequence of {len(columns)} tokens")
        out[row, columns[:count]] = routes[:count]
    return out
