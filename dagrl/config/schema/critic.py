"""The critic section: each key's type, default, range, choices and doc (conf/critic/default.yaml is
written from it)."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.algo.catalog import LOSS_AGGREGATIONS
from dagrl.config.schema.lora import LoraAdapters
from dagrl.config.schema.optim import CriticOptim
from dagrl.config.schema.spec import NON_NEGATIVE_INT, POSITIVE, POSITIVE_INT, ModelDir, Section, key, section


@dataclass(frozen=True)
class CriticModel(Section):
    """the HF model the critic's decoder starts from (its LM head is replaced by a value head)"""

    path: ModelDir | None = key(
        None, "local HF model directory; null = actor_rollout_ref.model.path (same tokenizer required)"
    )
    enable_gradient_checkpointing: bool = key(
        "${actor_rollout_ref.model.enable_gradient_checkpointing}", "full activation recompute in the critic"
    )
    use_remove_padding: bool = key(
        "${actor_rollout_ref.model.use_remove_padding}",
        "pack the critic's micro-batches without padding (as the actor's key)",
    )
    lora: LoraAdapters = section(
        LoraAdapters,
        "LoRA adapters on the critic's decoder: its base frozen, the adapters and the value head train",
    )


@dataclass(frozen=True)
class CriticMegatron(Section):
    """only what may differ from the actor's megatron section"""

    param_offload: bool = key(False, "keep critic parameters on the host outside the phases that use them")
    grad_offload: bool = key(False, "keep critic gradient buffers on the host between updates")
    optimizer_offload: bool = key(False, "keep critic optimizer state on the host between updates")
    seed: int = key(
        "${actor_rollout_ref.actor.megatron.seed}", "seed of the value head's random initialisation", NON_NEGATIVE_INT
    )


@dataclass(frozen=True)
class Critic(Section):
    """The PPO value model (verl's critic.* keys). Built only when the graph has a critic node (dag=ppo); it reuses the
    actor's parallel layout (actor_rollout_ref.actor.megatron.*), param_dtype and distributed-optimizer setting."""

    strategy: str = key(
        "megatron", "training engine of the critic; megatron is the one dagrl has", choices=("megatron",)
    )
    model: CriticModel = section(
        CriticModel, "the HF model the critic's decoder starts from (its LM head is replaced by a value head)"
    )
    ppo_mini_batch_size: int = key(
        "${actor_rollout_ref.actor.ppo_mini_batch_size}",
        "prompts per critic optimizer step, over all ranks (x rollout.n responses)",
        POSITIVE_INT,
    )
    ppo_micro_batch_size_per_gpu: int = key(
        "${actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu}",
        "responses per critic forward/backward on one rank",
        POSITIVE_INT,
    )
    forward_micro_batch_size_per_gpu: int = key(
        "${critic.ppo_micro_batch_size_per_gpu}", "responses per forward when computing values", POSITIVE_INT
    )
    use_dynamic_bsz: bool = key(
        "${actor_rollout_ref.actor.use_dynamic_bsz}",
        "form critic micro-batches by a token budget instead of a row count",
    )
    ppo_max_token_len_per_gpu: int = key(
        32768,
        "use_dynamic_bsz: real tokens per critic forward/backward on one GPU (>= max prompt + response length)",
        POSITIVE_INT,
    )
    forward_max_token_len_per_gpu: int = key(
        "${critic.ppo_max_token_len_per_gpu}",
        "use_dynamic_bsz: real tokens per forward when computing values",
        POSITIVE_INT,
    )
    ppo_epochs: int = key(
        "${actor_rollout_ref.actor.ppo_epochs}", "passes of the critic over each step's batch", POSITIVE_INT
    )
    shuffle: bool = key("${actor_rollout_ref.actor.shuffle}", "reshuffle responses into mini-batches each critic epoch")
    cliprange_value: float = key(
        0.5, "new values stay within this distance of the rollout-time values in the clipped loss", POSITIVE
    )
    loss_agg_mode: str = key(
        "${actor_rollout_ref.actor.loss_agg_mode}",
        "aggregation of the value loss over the mini-batch (as the actor's)",
        choices=LOSS_AGGREGATIONS.choices,
    )
    grad_clip: float | None = key(
        1.0, "max global grad norm of the critic (canonical; optim.clip_grad is an alias)", POSITIVE
    )
    optim: CriticOptim = section(CriticOptim, "critic optimizer and LR schedule (stepped once per critic mini-batch)")
    megatron: CriticMegatron = section(CriticMegatron, "only what may differ from the actor's megatron section")
