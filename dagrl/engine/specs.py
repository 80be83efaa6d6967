"""Plain specs passed to engines. No torch import: pre-flight checks use these before heavy imports."""
from __future__ import annotations

from dataclasses import dataclass


PARALLEL_SIZE_NAMES = ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                       "virtual_pipeline_model_parallel_size", "context_parallel_size",
                       "expert_model_parallel_size", "expert_tensor_parallel_size")


@dataclass
class ParallelLayout:
    """Model-parallel sizes of one Megatron model; DP is whatever the world size leaves."""
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: int | None = None
    context_parallel_size: int = 1
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: int | None = None
    sequence_parallel: bool = False

    def sizes(self) -> dict[str, int | None]:
        """The parallel sizes under Megatron's own keyword names (initialize_model_parallel, TransformerConfig)."""
        return {name: getattr(self, name) for name in PARALLEL_SIZE_NAMES}

    @property
    def model_parallel_size(self) -> int:
        return self.tensor_model_parallel_size * self.pipeline_model_parallel_size * self.context_parallel_size


@dataclass
class OptimSpec:
    """Optimizer and LR schedule of a trainable engine (actor or critic)."""
    lr: float = 1e-6
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.01
    clip_grad: float = 1.0
    lr_warmup_steps: int = 0          # resolved from lr_warmup_steps_ratio by the caller when needed
    lr_warmup_init: float = 0.0
    lr_decay_style: str = "constant"  # constant | linear | cosine
    lr_decay_steps: int | None = None  # None: total_training_steps
    min_lr: float = 0.0
    total_training_steps: int = 1


@dataclass
class SamplingSpec:
    """How one rollout call samples; passed explicitly, never stored in the batch."""
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    do_sample: bool = True
    response_length: int = 64
