"""MegatronActorEngine: the policy (or, frozen, the reference) on top of `MegatronEngine`: log-probs of responses
on vocab-parallel logits, training on them, and the HF weight export that rollouts load."""

from __future__ import annotations

from typing import Any, Iterator

import torch

from dagrl.data.batch import Batch
from dagrl.engine.base import LossFn, MegatronEngineSpec
from dagrl.engine.rollout.interface import WeightBucket
from dagrl.engine.megatron.engine import MegatronEngine
from dagrl.engine.megatron.logprob import vocab_parallel_log_probs
from dagrl.engine.megatron.router_replay import RoutingPass
from dagrl.engine.megatron.sequences import MicroBatch


class _Restride(torch.autograd.Function):
    """Identity whose backward hands on the gradient with plain strides. With the response-positions pre-hook the
    output layer returns [N, 1, V], which the GPT model transposes; its gradient comes back as the transpose of
    [1, N, V] (strides (V, N*V, 1)), which torch.matmul in the layer's backward does not fold: it copied the weight
    once per row (21 GB and 165 s a step for the CPU quickstart's frozen SmolLM2 head)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.reshape(-1).view(grad.shape) if grad.is_contiguous() else grad.contiguous()


def _restride_output_grad(module, args, output):
    """Output-layer forward hook: the output passed through _Restride."""
    if isinstance(output, tuple):
        return (_Restride.apply(output[0]), *output[1:])
    return _Restride.apply(output)


class MegatronActorEngine(MegatronEngine):
    """The actor (or, with `spec.optim=None`, the frozen reference): log-probs of responses, training on them,
    and the HF weight export that rollouts load."""

    role = "actor"

    def __init__(self, spec: MegatronEngineSpec) -> None:
        super().__init__(spec)
        self._export_entries: list | None = None  # the weight export's parameter -> HF rule table, built once
        self._select_logits = not self.tf_config.sequence_parallel
        if self._select_logits:
            for module in self.modules:
                if getattr(module, "post_process", False):
                    module.output_layer.register_forward_pre_hook(self._response_positions_only, with_kwargs=True)
                    module.output_layer.register_forward_hook(_restride_output_grad)

    def _response_positions_only(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Output-layer pre-hook: keep the hidden states that predict real response tokens ([S, b, h] -> [N, 1, h],
        `MicroBatch.kept` order). The vocabulary projection then costs N/S of the full one. Not used under sequence
        parallelism, where each TP rank holds only a slice of the sequence here."""
        micro = self._micro
        rows, cols = micro.kept()
        # (contiguous: an indexing result takes its index's strides, and a strided matmul rounds differently)
        hidden = args[0][micro.logit_pos[rows, cols], micro.logit_row[rows]].unsqueeze(1).contiguous()
        return (hidden, *args[1:]), kwargs

    def _response_log_probs(
        self, micro: MicroBatch, logits: torch.Tensor, temperature: float, with_entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[rows, R] log-probs (and entropies) of the micro-batch's responses, 0 off the response mask. Computed on
        the real response tokens only (`MicroBatch.kept`), then placed in the padded layout."""
        rows, cols = micro.kept()
        if self._select_logits:  # the hook already kept those positions, in order: [1, N, V]
            response_logits = logits.reshape(-1, logits.shape[-1])
        else:
            response_logits = logits[micro.logit_row[rows], micro.logit_pos[rows, cols]]
        flat, flat_entropy = vocab_parallel_log_probs(
            response_logits, micro.targets[rows, cols], self.hf_config.vocab_size, with_entropy, temperature
        )

        def padded(values: torch.Tensor) -> torch.Tensor:
            return self._context_parallel_rows(
                micro, values.new_zeros(micro.targets.shape).index_put((rows, cols), values)
            )

        return padded(flat), (padded(flat_entropy) if flat_entropy is not None else None)

    def compute_log_prob(
        self,
        batch: Batch,
        micro_batch_size: int,
        temperature: float,
        with_entropy: bool,
        max_token_len: int | None = None,
        routing: RoutingPass | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and entropies) of `batch["responses"]`, float32 [B, R], 0 where response_mask is 0.
        `max_token_len`: dynamic batch size (micro-batches of at most that many real tokens per GPU). `routing`:
        MoE routes replayed and/or recorded in this pass (router_replay.py)."""

        def head(micro: MicroBatch, logits: torch.Tensor) -> dict[str, torch.Tensor]:
            log_probs, entropy = self._response_log_probs(micro, logits, temperature, with_entropy)
            out = {"log_probs": log_probs.detach()}
            if entropy is not None:
                out["entropy"] = entropy.detach()
            return out

        rows = self._forward_rows(
            batch,
            micro_batch_size,
            head,
            ["log_probs", "entropy"] if with_entropy else ["log_probs"],
            max_token_len,
            routing,
        )
        return rows["log_probs"], rows.get("entropy")

    def train_step(
        self,
        batch: Batch,
        loss_fn: LossFn,
        micro_batch_size: int,
        temperature: float,
        max_token_len: int | None = None,
        with_entropy: bool = True,
        routing: RoutingPass | None = None,
    ) -> dict[str, float]:
        """One optimizer step whose gradient is that of the sum of `loss_fn` over all micro-batches and DP ranks."""

        def head(micro: MicroBatch, logits: torch.Tensor) -> Any:
            log_probs, entropy = self._response_log_probs(micro, logits, temperature, with_entropy)
            return loss_fn(micro.batch, log_probs, entropy)

        return self._train(batch, micro_batch_size, head, max_token_len, routing)

    def export_weights(self, bucket_bytes: int, adapters: bool = True) -> Iterator[WeightBucket]:
        """Full HF-named tensors, in buckets of at most `bucket_bytes`; collective, every rank gets everything.
        With LoRA: W + scaling * B A, or the frozen base W itself with `adapters=False`."""
        from dagrl.engine.megatron.weight_export import export_entries, export_hf_weights

        if self._export_entries is None:
            self._export_entries = export_entries(self.modules, self.hf_config)
        with self._resident(params=True):
            stream = export_hf_weights(self.modules, self.hf_config, bucket_bytes, self._export_entries)
            if self.spec.lora is not None and adapters:
                from dagrl.engine.megatron.lora import merged

                stream = merged(stream, self.export_adapter())
            yield from stream

    def export_adapter(self) -> Any:
        """The LoRA adapter (`dagrl.engine.lora.LoraAdapter`, HF/PEFT names, on the host); collective."""
        from dagrl.engine.megatron.lora import gather_adapter

        with self._resident(params=True):
            return gather_adapter(self.modules, self.hf_config, self.spec.lora)
