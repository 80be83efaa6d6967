from __future__ import annotations

from tests.reliability.corpus.case import Case

TOPIC = "LoRA adapters (actor_rollout_ref.model.lora, critic.model.lora)"
LORA = ("actor_rollout_ref.model.lora.rank=8", "actor_rollout_ref.model.lora.merge=true")
PPO = ("dag=ppo", "algorithm.adv_estimator=gae")
CASES: tuple[Case, ...] = (
    Case(
        "lora_unknown_target",
        "an adapter on a module LoRA cannot take (`lm_head`)",
        (*LORA, "actor_rollout_ref.model.lora.target_modules=[q_proj,lm_head]"),
        ("actor_rollout_ref.model.lora.target_modules", "['lm_head']", "choose from linear_qkv"),
    ),
    Case(
        "lora_rank_over_hidden",
        "a rank above the model's hidden size",
        ("actor_rollout_ref.model.lora.rank=100000", "actor_rollout_ref.model.lora.merge=true"),
        ("actor_rollout_ref.model.lora.rank=100000", "e.g. 8 to 64"),
    ),
    Case(
        "lora_negative_rank",
        "a negative rank",
        ("actor_rollout_ref.model.lora.rank=-8",),
        ("actor_rollout_ref.model.lora.rank",),
    ),
    Case(
        "lora_zero_alpha",
        "alpha 0 (the adapter would add nothing)",
        (*LORA, "actor_rollout_ref.model.lora.alpha=0"),
        ("actor_rollout_ref.model.lora.alpha",),
    ),
    Case(
        "lora_with_trainable_top_layers",
        "LoRA beside `trainable_top_layers`, which trains base layers",
        (*LORA, "actor_rollout_ref.model.trainable_top_layers=1"),
        ("actor_rollout_ref.model.trainable_top_layers", "set actor_rollout_ref.model.trainable_top_layers=null"),
    ),
    Case(
        "lora_alpha_without_rank",
        "`lora.alpha` set while `lora.rank=0` (no adapter: nothing it scales)",
        ("actor_rollout_ref.model.lora.alpha=16",),
        ("actor_rollout_ref.model.lora.alpha", "set actor_rollout_ref.model.lora.rank"),
    ),
    Case(
        "lora_merged_with_fp8_training",
        "merged LoRA sync beside FP8 training (TransformerEngine would keep the quantized merge for the backward)",
        (*LORA, "+actor_rollout_ref.actor.megatron.override_transformer_config.fp8=e4m3"),
        (
            "actor_rollout_ref.model.lora.merge=true runs the actor's linears on merged weights",
            "set actor_rollout_ref.model.lora.merge=false",
        ),
    ),
    Case(
        "critic_lora_rank_over_hidden",
        "a critic adapter rank above its model's hidden size",
        (*PPO, "critic.model.lora.rank=100000"),
        ("critic.model.lora.rank=100000", "e.g. 8 to 64"),
    ),
    Case(
        "critic_lora_merge",
        "`critic.model.lora.merge` (the critic has no rollout to sync)",
        (*PPO, "critic.model.lora.rank=8", "critic.model.lora.merge=true"),
        ("critic.model.lora.merge", "drop the key"),
    ),
)
