from __future__ import annotations

from tests.reliability.corpus.case import MEGATRON, Case

TOPIC = "Keys and values of other trainers (verl, siiRL, TRL, OpenRLHF, NeMo-RL)"
CASES: tuple[Case, ...] = (
    Case(
        "verl_return_raw_chat",
        "verl's `data.return_raw_chat=true`",
        ("data.return_raw_chat=true",),
        ("'data.return_raw_chat' is verl's", "drop the key"),
    ),
    Case(
        "verl_dataloader_num_workers",
        "verl's `data.dataloader_num_workers=0`",
        ("data.dataloader_num_workers=0",),
        ("'data.dataloader_num_workers' is verl's",),
    ),
    Case(
        "verl_filter_overlong_workers",
        "verl's `data.filter_overlong_prompts_workers=8`",
        ("data.filter_overlong_prompts_workers=8",),
        ("'data.filter_overlong_prompts_workers' is verl's", "data.filter_overlong_prompts=true"),
    ),
    Case(
        "verl_lora_rank",
        "verl's `model.lora_rank=32`",
        ("actor_rollout_ref.model.lora_rank=32",),
        ("'actor_rollout_ref.model.lora_rank' is verl's", "set actor_rollout_ref.model.lora.rank"),
    ),
    Case(
        "verl_use_shm",
        "verl's `model.use_shm=true`",
        ("actor_rollout_ref.model.use_shm=true",),
        ("'actor_rollout_ref.model.use_shm' is verl's", "drop the key"),
    ),
    Case(
        "verl_ulysses_sequence_parallel",
        "verl's `actor.ulysses_sequence_parallel_size=2`",
        ("actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",),
        ("is verl's", f"{MEGATRON}.context_parallel_size"),
    ),
    Case(
        "verl_use_mbridge",
        "verl's `megatron.use_mbridge=true`",
        (f"{MEGATRON}.use_mbridge=true",),
        ("'actor_rollout_ref.actor.megatron.use_mbridge' is verl's", "drop the key"),
    ),
    Case(
        "verl_del_local_ckpt_after_load",
        "verl's `trainer.del_local_ckpt_after_load=true`",
        ("trainer.del_local_ckpt_after_load=true",),
        ("is verl's", "max_actor_ckpt_to_keep"),
    ),
    Case(
        "verl_multi_turn_max_turns",
        "verl's `multi_turn.max_turns=3`",
        ("actor_rollout_ref.rollout.multi_turn.max_turns=3",),
        (
            "'actor_rollout_ref.rollout.multi_turn.max_turns' is verl's",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns",
        ),
    ),
    Case(
        "verl_agent_num_workers",
        "verl's `rollout.agent.num_workers=8`",
        ("actor_rollout_ref.rollout.agent.num_workers=8",),
        ("is verl's", "multi_turn"),
    ),
    Case(
        "verl_use_rollout_log_probs",
        "verl's `async_training.use_rollout_log_probs=true`",
        ("async_training.use_rollout_log_probs=true",),
        ("'async_training.use_rollout_log_probs' is verl's", "calculate_log_probs=true"),
    ),
    Case(
        "verl_compute_prox_log_prob",
        "verl's `async_training.compute_prox_log_prob=true`",
        ("async_training.compute_prox_log_prob=true",),
        ("is verl's", "off_policy=decoupled"),
    ),
    Case(
        "trl_learning_rate",
        "TRL's `learning_rate=1e-6`",
        ("learning_rate=1e-6",),
        ("'learning_rate' is not a dagrl key", "write actor_rollout_ref.actor.optim.lr=1e-6"),
    ),
    Case(
        "trl_num_generations",
        "TRL's `num_generations=8`",
        ("num_generations=8",),
        ("'num_generations'", "write actor_rollout_ref.rollout.n=8"),
    ),
    Case(
        "trl_beta",
        "TRL GRPO's KL weight `beta=0.04`",
        ("beta=0.04",),
        ("'beta'", "actor_rollout_ref.actor.kl_loss_coef (with actor_rollout_ref.actor.use_kl_loss=true)"),
    ),
    Case(
        "trl_max_completion_length",
        "TRL's `max_completion_length=256`",
        ("max_completion_length=256",),
        ("'max_completion_length'", "write data.max_response_length=256"),
    ),
    Case(
        "trl_per_device_batch",
        "TRL's `per_device_train_batch_size=4`",
        ("per_device_train_batch_size=4",),
        ("'per_device_train_batch_size'", "write actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"),
    ),
    Case(
        "trl_use_vllm",
        "TRL's `use_vllm=true`",
        ("use_vllm=true",),
        ("'use_vllm'", "actor_rollout_ref.rollout.name=vllm"),
    ),
    Case(
        "openrlhf_n_samples",
        "OpenRLHF's `n_samples_per_prompt=8`",
        ("n_samples_per_prompt=8",),
        ("'n_samples_per_prompt'", "write actor_rollout_ref.rollout.n=8"),
    ),
    Case(
        "openrlhf_init_kl_coef",
        "OpenRLHF's `init_kl_coef=0.01`",
        ("init_kl_coef=0.01",),
        (
            "'init_kl_coef'",
            "algorithm.kl_ctrl.kl_coef (with algorithm.use_kl_in_reward=true)",
            "actor_rollout_ref.actor.kl_loss_coef",
        ),
    ),
    Case(
        "openrlhf_actor_learning_rate",
        "OpenRLHF's `actor_learning_rate=5e-7`",
        ("actor_learning_rate=5e-7",),
        ("'actor_learning_rate'", "write actor_rollout_ref.actor.optim.lr=5e-7"),
    ),
    Case(
        "nemo_num_generations",
        "NeMo-RL's `grpo.num_generations_per_prompt=8`",
        ("grpo.num_generations_per_prompt=8",),
        ("'grpo.num_generations_per_prompt'", "write actor_rollout_ref.rollout.n=8"),
    ),
    Case(
        "nemo_policy_model_name",
        "NeMo-RL's `policy.model_name=<dir>`",
        ("policy.model_name={model}",),
        ("'policy.model_name'", "write actor_rollout_ref.model.path=<model>"),
    ),
)
