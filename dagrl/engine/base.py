"""The small interfaces engines implement, so a new backend slots in without touching the loop.

Sequence layout shared by every engine (built by the rollout node):
  input_ids, attention_mask, position_ids  [B, P + R]  left-padded prompt (P = prompt length) followed by the
                                                       right-padded response (R = response length)
  responses, response_mask                 [B, R]      generated token ids, 1 on generated tokens (eos included)
Log-probs and entropies are returned as `[B, R]` float32 tensors aligned with `responses`, 0 where
`response_mask` is 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

import torch

from dagrl.data.batch import Batch
from dagrl.engine.lora import LoraSpec
from dagrl.engine.rollout.interface import WeightBucket
from dagrl.placement import ParallelLayout

# loss_fn(micro_batch, log_probs [b, R], entropy [b, R] or None) -> (loss, metrics).
# The loss and every metric are additive contributions: the engine sums them over micro-batches and DP ranks,
# and the gradient it applies is that of the sum. Normalisation (global token mean, ...) is the caller's job,
# done through per-token weights it puts in the batch before the step.
LossFn = Callable[[Batch, torch.Tensor, "torch.Tensor | None"], "tuple[torch.Tensor, dict[str, torch.Tensor]]"]


@dataclass
class OptimSpec:
    """Optimizer and LR schedule of a trainable engine (actor or critic)."""

    lr: float = 1e-6
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.01
    clip_grad: float = 1.0
    lr_warmup_steps: int = 0  # resolved from lr_warmup_steps_ratio by the caller when needed
    lr_warmup_init: float = 0.0
    lr_decay_style: str = "constant"  # constant | linear | cosine
    lr_decay_steps: int | None = None  # None: total_training_steps
    min_lr: float = 0.0
    total_training_steps: int = 1


@dataclass
class MegatronEngineSpec:
    """Everything needed to build one Megatron model (actor, reference or critic)."""

    model_path: str
    layout: ParallelLayout = field(default_factory=ParallelLayout)
    optim: OptimSpec | None = None  # None: a frozen model (reference)
    param_dtype: torch.dtype = torch.float32
    use_distributed_optimizer: bool = False
    seed: int = 42
    gradient_checkpointing: bool = False  # full recompute unless override_transformer_config says otherwise
    override_transformer_config: dict[str, Any] = field(default_factory=dict)
    trainable_top_layers: int | None = None  # train only the top N decoder layers (+ final norm); None = all
    param_offload: bool = False
    grad_offload: bool = False
    optimizer_offload: bool = False
    remove_padding: bool = False  # pack each micro-batch's rows into one sequence (verl's use_remove_padding)
    fp32_lm_head: bool = False  # logits accumulated and kept in fp32 (matches vLLM's head_dtype=float32)
    overlap_grad_reduce: bool | None = None  # DP grad reduction during backward; None = on GPU only (as Megatron)
    dist_checkpoint_path: str | None = None  # initial weights from this Megatron dist checkpoint, not model_path's
    save_contents: tuple[str, ...] = ("model", "optimizer", "extra")  # parts save_checkpoint writes
    load_contents: tuple[str, ...] | None = None  # parts load_checkpoint restores; None = all the checkpoint holds
    router_replay: bool = False  # MoE routes can be replayed and recorded (engine/megatron/router_replay.py)
    lora: LoraSpec | None = None  # adapters on the frozen base (engine/lora.py); None = full fine-tuning


class ActorEngine(Protocol):
    """A trainable (or frozen) causal LM: the actor, and with `optim=None` the reference."""

    # max_token_len set: dynamic batch size, micro-batches of at most that many real tokens (micro_batch_size unused)
    def compute_log_prob(
        self,
        batch: Batch,
        micro_batch_size: int,
        temperature: float,
        with_entropy: bool,
        max_token_len: int | None = None,
        routing: Any = None,  # MoE routes replayed / recorded in this pass (engine/megatron/router_replay.py)
    ) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    # with_entropy=False: loss_fn gets entropy=None (the full-vocabulary entropy costs a pass over the logits)
    def train_step(
        self,
        batch: Batch,
        loss_fn: LossFn,
        micro_batch_size: int,
        temperature: float,
        max_token_len: int | None = None,
        with_entropy: bool = True,
        routing: Any = None,
    ) -> dict[str, float]: ...

    # with LoRA: W + scaling * B A, or the frozen base with adapters=False (adapter-only sync's first load)
    def export_weights(self, bucket_bytes: int, adapters: bool = True) -> Iterator[WeightBucket]: ...

    def export_adapter(self) -> Any: ...  # LoRA: the adapter (dagrl.engine.lora.LoraAdapter), collective

    def offload_params(self) -> None: ...  # the next phase that needs them brings them back

    def offload_grads(self) -> None: ...

    def offload_optimizer(self) -> None: ...

    def save_checkpoint(self, path: str) -> None: ...

    def load_checkpoint(self, path: str) -> None: ...

    def state_is_finite(self) -> bool: ...  # collective: no NaN/inf in parameters and optimizer state, any rank


class CriticEngine(Protocol):
    """A trainable value model on the actor's layout: one value per token of the response."""

    def compute_values(
        self, batch: Batch, micro_batch_size: int, max_token_len: int | None = None
    ) -> torch.Tensor: ...  # [B, R] float32, 0 off the mask

    # loss_fn gets the values where the actor's gets log-probs
    def train_step(
        self, batch: Batch, loss_fn: LossFn, micro_batch_size: int, max_token_len: int | None = None
    ) -> dict[str, float]: ...

    def offload_params(self) -> None: ...

    def offload_grads(self) -> None: ...

    def offload_optimizer(self) -> None: ...

    def save_checkpoint(self, path: str) -> None: ...

    def load_checkpoint(self, path: str) -> None: ...

    def state_is_finite(self) -> bool: ...
