"""MoE routing replay in the Megatron actor: each router's top-k is forced to given routes, and the router's own
top-k can be kept to compare with them or to replay later.

Routes travel in the batch as `routed_experts` [B, P + R, layers, top_k] (int16): for every column of `input_ids`
(left-padded prompt, right-padded response) the experts each decoder layer's router chose for that token as input;
-1 where none was recorded (padding, and the last response token, which the rollout samples but never feeds
back). The micro-batch builders (sequences.py) move them with their tokens, into the padded [b, S] block or the
packed row, so the routes given to a router are in the order it sees the tokens: Megatron flattens its [S, b]
hidden states sequence-major, and under sequence parallelism each TP rank holds one contiguous slice of S.

Megatron-Core's router calls `router_replay.get_replay_topk(...)` for its top-k when
TransformerConfig.moe_enable_routing_replay is on. Its own RouterReplay objects live in one process-wide list
(shared by the actor and the reference); each router's is replaced here by a `_LayerReplay` owned by one engine,
which takes the current micro-batch's routes when `_forward_step` hands it over."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from dagrl.engine.megatron.sequences import MicroBatch, RowLayout


@dataclass
class RoutingPass:
    """What one forward pass does with routes: `replay` forces the batch's `routed_experts`; `record` keeps each
    router's own top-k (computed at the replayed inputs when both are set). Filled by the pass: `agreed` of
    `compared` top-k choices (token x layer x k, tokens with a given route) where the router's own equals the
    given one, this DP shard's totals on every rank of its model-parallel group; `routes`, with `keep`, the
    router's own routes in the batch's `routed_experts` layout."""

    replay: bool = False
    record: bool = False
    keep: bool = False
    agreed: float = 0.0
    compared: float = 0.0
    routes: torch.Tensor | None = None


def old_log_prob_pass(mode: str, has_routes: bool) -> RoutingPass | None:
    """The old-log-prob pass of actor.router_replay.mode: R3 replays the rollout's routes (and keeps the router's
    own choice at the replayed inputs, for the agreement); R2 records the routes the update replays; disabled
    records only to measure the agreement with the rollout's routes, when it recorded some."""
    if mode == "R3":
        if not has_routes:
            raise ValueError("actor_rollout_ref.actor.router_replay.mode=R3 but the batch has no routed_experts")
        return RoutingPass(replay=True, record=True)
    if mode == "R2":
        return RoutingPass(record=True, keep=True)
    return RoutingPass(record=True) if has_routes else None


def update_pass(mode: str, has_routes: bool) -> RoutingPass | None:
    """The update replays the batch's routes (R3: the rollout's; R2: the old-log-prob pass's) under either mode."""
    if mode == "disabled":
        return None
    if not has_routes:
        raise ValueError(f"actor_rollout_ref.actor.router_replay.mode={mode} but the batch has no routed_experts")
    return RoutingPass(replay=True)


class _LayerReplay:
    """Stands in for Megatron's RouterReplay on one router (`layer`: its 0-based decoder layer)."""

    def __init__(self, layer: int) -> None:
        self.layer = layer
        self.target: torch.Tensor | None = None  # [tokens, k] this micro-batch's routes, -1 where none
        self.record = False
        self.replay = False
        self.micro: MicroBatch | None = None  # the micro-batch `target` belongs to
        self.recorded: list[tuple[MicroBatch, torch.Tensor]] = []

    def get_replay_topk(
        self, scores: torch.Tensor, topk: int, num_groups: Any = None, group_topk: Any = None, default_compute_topk=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        own = default_compute_topk(scores, topk, num_groups=num_groups, group_topk=group_topk)
        if self.target is None:
            return own
        if self.record:
            self.recorded.append((self.micro, own[1].detach()))
        if not self.replay:
            return own
        given = self.target.to(scores.device).long()
        # a position without a route (padding, a response's last token) keeps the router's own choice: its output
        # is never read, and the expert batches keep the sizes of an unreplayed pass
        given = torch.where(given < 0, own[1], given)
        return scores.gather(1, given), given


class RouterReplayHooks:
    """Every router of one engine's model chunks, driven pass by pass."""

    def __init__(self, modules: list[torch.nn.Module], tf_config: Any, num_layers: int) -> None:
        from megatron.core.transformer.moe.router_replay import RouterReplay

        if getattr(tf_config, "moe_router_fusion", False):
            raise ValueError("MoE routing replay needs Megatron's unfused router: leave moe_router_fusion off")
        if tf_config.context_parallel_size > 1:
            raise ValueError(
                "actor_rollout_ref.actor.router_replay.mode / rollout.enable_rollout_routing_replay: routing replay "
                "under context parallelism is not supported: set actor_rollout_ref.actor.megatron."
                "context_parallel_size=1"
            )
        if tf_config.recompute_granularity is not None and tf_config.pipeline_model_parallel_size > 1:
            # a recomputed forward would read the routes of the micro-batch forwarded last, not its own
            raise ValueError(
                "MoE routing replay with activation recompute needs pipeline_model_parallel_size=1: set "
                "actor_rollout_ref.model.enable_gradient_checkpointing=false or the pipeline size to 1"
            )
        self.sequence_parallel = tf_config.sequence_parallel
        self.num_layers, self.top_k = num_layers, tf_config.moe_router_topk
        self.layers: list[_LayerReplay] = []
        for module in modules:
            for sub in module.modules():
                if isinstance(getattr(sub, "router_replay", None), RouterReplay):
                    RouterReplay.global_router_replay_instances.remove(sub.router_replay)
                    sub.router_replay = _LayerReplay(sub.layer_number - 1)
                    self.layers.append(sub.router_replay)
        self.active: RoutingPass | None = None

    def begin(self, routing: RoutingPass | None) -> None:
        self.active = routing
        for layer in self.layers:
            layer.replay = routing is not None and routing.replay
            layer.record = routing is not None and routing.record
            layer.target, layer.recorded = None, []

    def set_micro_batch(self, micro: MicroBatch) -> None:
        """Before each forward: this micro-batch's routes, in the order this rank's routers see its tokens."""
        if self.active is None:
            return
        routes = micro.routes
        if routes is None:
            if self.active.replay:
                raise ValueError("routing replay: the batch has no routed_experts")
            routes = torch.full((*micro.tokens.shape, 1, 1), -1, dtype=torch.int16, device=micro.tokens.device)
        flat = _sequence_major(routes, self.sequence_parallel)
        for layer in self.layers:
            layer.target = flat[:, min(layer.layer, flat.shape[1] - 1)]
            layer.micro = micro

    def finish(self, batch: Any, device: torch.device) -> None:
        """After the pass: agreement totals and (record) the recorded routes in the batch's layout."""
        routing, self.active = self.active, None
        if routing is None or not routing.record:
            return
        from megatron.core import parallel_state as ps

        counts = torch.zeros(2, dtype=torch.float64)
        for layer in self.layers:
            for micro, own in layer.recorded:
                if micro.routes is None:
                    continue
                given = _sequence_major(micro.routes, self.sequence_parallel)[:, layer.layer].to(own.device)
                has = given[:, 0] >= 0
                same = (own[has].unsqueeze(-1) == given[has].unsqueeze(-2)).any(-1)
                counts += torch.tensor([float(same.sum()), float(same.numel())], dtype=torch.float64)
        counts = counts.to(device)
        routes = self._recorded_routes(batch).to(device, torch.int32) if routing.keep else None  # (gloo: no int16)
        groups = [ps.get_pipeline_model_parallel_group()]  # each stage holds its own layers
        if self.sequence_parallel:  # each TP rank its own slice of the tokens
            groups.append(ps.get_tensor_model_parallel_group())
        for group in groups:
            if dist.get_world_size(group) > 1:
                dist.all_reduce(counts, group=group)
                if routes is not None:
                    dist.all_reduce(routes, op=dist.ReduceOp.MAX, group=group)
        routing.agreed, routing.compared = float(counts[0]), float(counts[1])
        routing.routes = None if routes is None else routes.to(torch.int16)
        for layer in self.layers:
            layer.recorded, layer.target = [], None

    def _recorded_routes(self, batch: Any) -> torch.Tensor:
        """The routers' own routes [B, P + R, layers, k] in the batch's layout; -1 where this rank saw none."""
        layout = RowLayout.of(batch)
        out = torch.full((len(batch), layout.columns.shape[1], self.num_layers, self.top_k), -1, dtype=torch.int16)
        for layer in self.layers:
            for micro, own in layer.recorded:
                block = _unflatten(own.cpu(), micro, self.sequence_parallel)  # [b, S, k], -1 off this rank
                for i, row in enumerate(micro.index.tolist()):
                    length, start = int(layout.lengths[row]), int(micro.starts[i])
                    cols = layout.columns[row, :length]
                    out[row, cols, layer.layer] = block[int(micro.logit_row[i]), start : start + length].to(out.dtype)
        return out


def _sequence_major(routes: torch.Tensor, sequence_parallel: bool) -> torch.Tensor:
    """[b, S, layers, k] -> [S x b (this rank's slice under sequence parallelism), layers, k], Megatron's order."""
    flat = routes.transpose(0, 1)
    if sequence_parallel:
        from megatron.core import parallel_state as ps

        flat = flat.chunk(ps.get_tensor_model_parallel_world_size())[ps.get_tensor_model_parallel_rank()]
    return flat.reshape(-1, *routes.shape[2:])


def _unflatten(own: torch.Tensor, micro: MicroBatch, sequence_parallel: bool) -> torch.Tensor:
    """A router's recorded [tokens, k] -> [b, S, k] over the whole micro-batch, -1 where another TP rank's slice."""
    b, seq = micro.tokens.shape
    full = torch.full((seq, b, own.shape[-1]), -1, dtype=own.dtype)
    if sequence_parallel:
        from megatron.core import parallel_state as ps

        size = seq // ps.get_tensor_model_parallel_world_size()
        rank = ps.get_tensor_model_parallel_rank()
        full[rank * size : (rank + 1) * size] = own.view(size, b, -1)
    else:
        full[:] = own.view(seq, b, -1)
    return full.transpose(0, 1)
