"""MegatronCriticEngine: the PPO value model, a Megatron GPTModel whose vocabulary projection is a value head.

The decoder is initialised from the HF model's weights (the LM head is not used); the value head (hidden -> 1)
starts from a seeded random row, identical on every rank. Values are aligned with `responses` like verl's: the
value of response token t is read at the position that predicts it, i.e. the state before the token. With LoRA
(critic.model.lora) the decoder's base stays frozen and the adapters and the value head train (lora.py).
"""

from __future__ import annotations

import copy
import logging

import torch
import torch.nn.functional as F

from dagrl.data.batch import Batch
from dagrl.engine.base import LossFn
from dagrl.engine.megatron.engine import MegatronEngine
from dagrl.engine.megatron.sequences import MicroBatch

logger = logging.getLogger(__name__)


class ValueHead(torch.nn.Module):
    """hidden [s, b, h] -> values [s, b, 1], replicated (not split) over tensor-parallel ranks.

    Without sequence parallelism every TP rank holds the whole sequence, computes the same values and gets
    complete gradients, so nothing is reduced. With it, each TP rank holds s/TP positions: the values are
    all-gathered along the sequence (backward keeps each rank's own slice, since every rank computes the same
    loss), and the head's weight gradients, partial per rank, are summed over TP by Megatron's
    finalize_model_grads through the `sequence_parallel` parameter attribute, as for norm weights."""

    def __init__(self, hidden_size: int, dtype: torch.dtype, std: float, seed: int, sequence_parallel: bool) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.weight = torch.nn.Parameter((torch.randn(1, hidden_size, generator=generator) * std).to(dtype))
        self.bias = torch.nn.Parameter(torch.zeros(1, dtype=dtype))
        self.sequence_parallel = sequence_parallel
        for param in (self.weight, self.bias):
            param.sequence_parallel = sequence_parallel

    def forward(
        self, hidden: torch.Tensor, weight: torch.Tensor | None = None, runtime_gather_output: bool | None = None
    ) -> tuple[torch.Tensor, None]:
        """Called by GPTModel in place of its output layer (`weight` is the tied embedding, unused here)."""
        values = F.linear(hidden, self.weight, self.bias)
        if self.sequence_parallel:
            from megatron.core.tensor_parallel.mappings import gather_from_sequence_parallel_region

            values = gather_from_sequence_parallel_region(values, tensor_parallel_output_grad=False)
        return values, None


class MegatronCriticEngine(MegatronEngine):
    """The critic: values of response positions, and training on them with the actor's LossFn contract
    (the loss function receives values where the actor's receives log-probs, and no entropy)."""

    role = "critic"

    def _build_modules(self, on_gpu: bool) -> list[torch.nn.Module]:
        from dagrl.engine.megatron.hf_config import build_gpt_chunks
        from dagrl.engine.megatron.weights import import_hf_weights

        # Never tie the output layer to the embedding: it becomes the value head, which must not be
        # synchronised with (or checkpointed as) the word embeddings.
        untied = copy.deepcopy(self.hf_config)
        untied.tie_word_embeddings = False
        modules = build_gpt_chunks(untied, self.tf_config, on_gpu)
        for module in modules:
            if module.post_process:
                del module.output_layer  # the vocabulary projection; the value head takes its place below
            module.to(self.device)
        import_hf_weights(modules, self.hf_config, self.spec.model_path)
        for module in modules:
            if module.post_process:
                module.output_layer = ValueHead(
                    self.tf_config.hidden_size,
                    self.spec.param_dtype,
                    self.tf_config.init_method_std,
                    self.spec.seed,
                    self.tf_config.sequence_parallel,
                ).to(self.device)
        return modules

    def _trained_beside_adapters(self) -> list[torch.nn.Module]:
        """The value head: new, so LoRA trains it whole beside the adapters (PEFT's modules_to_save)."""
        return [module.output_layer for module in self.modules if module.post_process]

    def _response_values(self, micro: MicroBatch, output: torch.Tensor) -> torch.Tensor:
        """[rows, R] float32 values at the positions predicting each response token, 0 off the response mask."""
        values = output.squeeze(-1).float()[micro.logit_row.unsqueeze(1), micro.logit_pos]
        return self._context_parallel_rows(micro, values * micro.response_mask.to(values.dtype))

    def compute_values(self, batch: Batch, micro_batch_size: int, max_token_len: int | None = None) -> torch.Tensor:
        """Values of the states before each response token, float32 [B, R], 0 where response_mask is 0.
        `max_token_len`: dynamic batch size (micro-batches of at most that many real tokens per GPU)."""

        def head(micro: MicroBatch, output: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"values": self._response_values(micro, output).detach()}

        return self._forward_rows(batch, micro_batch_size, head, ["values"], max_token_len)["values"]

    def train_step(
        self, batch: Batch, loss_fn: LossFn, micro_batch_size: int, max_token_len: int | None = None
    ) -> dict[str, float]:
        """One optimizer step whose gradient is that of the sum of `loss_fn(micro_batch, values, None)` over all
        micro-batches and DP ranks; metrics are summed the same way, plus critic/grad_norm and critic/lr."""

        def head(micro: MicroBatch, output: torch.Tensor):
            return loss_fn(micro.batch, self._response_values(micro, output), None)

        return self._train(batch, micro_batch_size, head, max_token_len)
