"""Pre-flight of actor_rollout_ref.model.lora and critic.model.lora: target modules the family has, a rank the layers
can hold (both); a rollout that takes adapter-only sync, and no option that contradicts adapters on a frozen base (the
actor's)."""

from __future__ import annotations

from typing import Any

from dagrl.config.checks import as_list
from dagrl.config.derived import lora_served_merged
from dagrl.config.errors import ConfigError, require
from dagrl.config.model_dir import read_hf_config
from dagrl.config.preflight.fp8 import TRAIN_KEY, train_fp8
from dagrl.config.schema.lora import TARGETS, megatron_targets
from dagrl.config.tree import Cfg

KEY = "actor_rollout_ref.model.lora"
CRITIC_KEY = "critic.model.lora"


def check_adapters(lora: Any, key: str, hf_config: dict) -> None:
    """The rules of every LoRA section `key` (at rank > 0) against the model it adapts: targets that exist, a rank
    the layers can hold, no adapters on MoE experts."""
    targets = as_list(lora.target_modules)
    unknown = [name for name in targets if name not in TARGETS]
    require(
        targets and not unknown,
        f"{key}.target_modules",
        f"{key}.target_modules={targets}: {unknown or 'none'} is no linear a LoRA adapter can go on; choose from "
        f"linear_qkv linear_proj linear_fc1 linear_fc2 (or HF names q_proj k_proj v_proj o_proj gate_proj up_proj "
        f"down_proj)",
    )
    hidden = hf_config.get("hidden_size") or 0
    require(
        not hidden or lora.rank <= hidden,
        f"{key}.rank",
        f"{key}.rank={lora.rank} exceeds the model's hidden size {hidden}: a low-rank adapter needs rank < hidden "
        f"size, e.g. 8 to 64",
    )
    experts = hf_config.get("num_experts") or hf_config.get("num_local_experts") or 0
    fc = [name for name in megatron_targets(targets) if name in ("linear_fc1", "linear_fc2")]
    require(
        not (experts and fc),
        f"{key}.target_modules",
        f"{key}.target_modules holds {fc}, the MLP of an MoE model ({experts} experts): adapters on experts are not "
        f"supported; set {key}.target_modules=[linear_qkv,linear_proj]",
    )


def check_critic_lora(cfg: Cfg, hf_config: dict) -> None:
    """critic.model.lora against the critic's model (critic.model.path, else the actor's). The critic has no rollout
    and no trainable_top_layers, so the adapter rules are all that apply."""
    lora = cfg.critic.model.lora
    if not lora.rank:
        return
    path = cfg.critic.model.path
    check_adapters(lora, CRITIC_KEY, read_hf_config(path, key="critic.model.path") if path else hf_config)


def check_lora(cfg: Cfg, hf_config: dict) -> None:
    lora = cfg.actor_rollout_ref.model.lora
    if not lora.rank:
        return
    check_adapters(lora, KEY, hf_config)
    require(
        cfg.actor_rollout_ref.model.trainable_top_layers is None,
        "actor_rollout_ref.model.trainable_top_layers",
        f"actor_rollout_ref.model.trainable_top_layers trains base layers, {KEY}.rank={lora.rank} freezes every base "
        f"weight: set actor_rollout_ref.model.trainable_top_layers=null (or {KEY}.rank=0)",
    )
    name = cfg.actor_rollout_ref.rollout.name
    if train_fp8(cfg) and lora_served_merged(cfg):  # the cheap test first: the other imports the engine
        how = f"{KEY}.merge=true" if lora.merge else f"the {name} rollout merging the adapter it loads"
        fix = f"set {KEY}.merge=false (adapter-only sync)" if lora.merge else "use the vllm rollout"
        raise ConfigError(
            f"{KEY}.merge",
            f"{how} runs the actor's linears on merged weights, which {TRAIN_KEY}'s FP8 GEMMs would quantize and "
            f"keep for the backward (the adapter's gradient would reach earlier layers twice): {fix}, or drop "
            f"{TRAIN_KEY}",
        )
    if lora.merge:
        return
    from dagrl.engine.rollout.registry import engine_declares  # the engine's class says whether it loads adapters

    require(
        engine_declares(name, "supports_adapter"),
        f"{KEY}.merge",
        f"{KEY}.merge=false syncs only the adapter, which the {name} rollout cannot load: set {KEY}.merge=true "
        f"(W + BA through the full weight sync)",
    )
    require(
        cfg.actor_rollout_ref.hybrid_engine,
        f"{KEY}.merge",
        f"{KEY}.merge=false syncs adapters in the colocated trainer only; with actor_rollout_ref.hybrid_engine=false "
        f"set {KEY}.merge=true",
    )
