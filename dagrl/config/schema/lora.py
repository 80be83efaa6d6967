"""actor_rollout_ref.model.lora and critic.model.lora: LoRA adapters on a Megatron model, in verl's Megatron names (its
FSDP backend's HF module names are accepted in target_modules and mapped). The critic's section is the adapter keys
alone: it has no rollout, so nothing to merge or sync."""

from __future__ import annotations

from dataclasses import dataclass

from dagrl.config.schema.spec import NON_NEGATIVE_INT, POSITIVE, Range, Section, hinted, key

# Megatron's linear -> the HF modules it holds (the fused QKV and gate/up projections hold several)
MEGATRON_TO_HF = {
    "linear_qkv": ("q_proj", "k_proj", "v_proj"),
    "linear_proj": ("o_proj",),
    "linear_fc1": ("gate_proj", "up_proj"),
    "linear_fc2": ("down_proj",),
}
HF_TO_MEGATRON = {hf: megatron for megatron, names in MEGATRON_TO_HF.items() for hf in names}
TARGETS = (*MEGATRON_TO_HF, *HF_TO_MEGATRON)
_DROPOUT = Range(lambda v: isinstance(v, (int, float)) and 0 <= v < 1, "in [0, 1)")


def megatron_targets(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The Megatron linears `target_modules` names, in MEGATRON_TO_HF order (HF names map to their fused linear)."""
    wanted = {HF_TO_MEGATRON.get(name, name) for name in names}
    return tuple(name for name in MEGATRON_TO_HF if name in wanted)


@dataclass(frozen=True)
class LoraAdapters(Section):
    """LoRA adapters: the base weights frozen, y = W x + alpha/rank * B A dropout(x)"""

    rank: int = key(0, "adapter rank r; 0 = no LoRA, every parameter trains", NON_NEGATIVE_INT)
    alpha: float = key(32, "scaling numerator: the adapter's output is multiplied by alpha / rank", POSITIVE)
    dropout: float = key(0.0, "dropout on the adapter's input (training passes only)", hinted(_DROPOUT, "0 = none"))
    target_modules: list = key(
        ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"],
        "linears that get an adapter: linear_qkv linear_proj linear_fc1 linear_fc2 (HF names q_proj k_proj v_proj "
        "o_proj gate_proj up_proj down_proj map to the fused linear that holds them)",
    )


@dataclass(frozen=True)
class Lora(LoraAdapters):
    """LoRA adapters on the actor: the base weights frozen, y = W x + alpha/rank * B A dropout(x)"""

    merge: bool = key(
        False,
        "rollout weight sync: true = W + alpha/rank * B A through the full bucketed sync (any rollout), the actor "
        "computing with those same merged weights; false = only the adapter tensors, loaded by the rollout's "
        "load_adapter (megabytes a step)",
    )
