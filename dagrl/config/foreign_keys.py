"""More of verl's keys that dagrl does not have, each with what to do instead (load.VERL_KEYS takes them in). A key
under one of these names (actor_rollout_ref.rollout.agent.num_workers under ...rollout.agent) is answered the same."""
from __future__ import annotations

MORE_VERL_KEYS = {
    "actor_rollout_ref.model.use_shm": "dagrl reads the model from actor_rollout_ref.model.path itself (no "
                                       "shared-memory copy); drop the key",
    "actor_rollout_ref.rollout.agent": "dagrl's agent loop runs inside each rollout process, configured by "
                                       "actor_rollout_ref.rollout.multi_turn.*; drop the key",
    "data.dataloader_num_workers": "dagrl memory-maps an Arrow copy of the data files (data.cache_dir) in the "
                                   "training process, without loader workers; drop the key",
    "trainer.del_local_ckpt_after_load": "dagrl never deletes a checkpoint it resumed from; keep fewer with "
                                         "trainer.max_actor_ckpt_to_keep=N; drop the key",
    "actor_rollout_ref.actor.megatron.use_mbridge": "dagrl converts the HF weights of actor_rollout_ref.model.path "
                                                    "to Megatron itself (no mbridge); drop the key",
    "data.filter_overlong_prompts_workers": "dagrl filters overlong prompts in the training process while the data "
                                            "loads (data.filter_overlong_prompts=true), without worker processes; "
                                            "drop the key",
    "async_training.compute_prox_log_prob": "dagrl always recomputes pi_old (the proximal policy) in the trainer; "
                                            "for AReaL's decoupled loss set "
                                            "actor_rollout_ref.actor.policy_loss.off_policy=decoupled; drop the key",
}


def foreign_key_hint(key: str, known: dict[str, str]) -> str | None:
    """What to do instead of `key` when it, or a section above it, is one of `known`."""
    parts = key.split(".")
    for end in range(len(parts), 1, -1):
        hint = known.get(".".join(parts[:end]))
        if hint:
            return hint
    return None


# Other trainers' names (TRL's GRPOConfig/PPOConfig and TrainingArguments, OpenRLHF's flags, NeMo-RL's YAML keys,
# which nest them: grpo.num_generations_per_prompt, policy.model_name) -> dagrl's key. An override outside dagrl's
# sections is looked up whole, then by its last part; the dagrl key is named with the user's value.
LR, N = "actor_rollout_ref.actor.optim.lr", "actor_rollout_ref.rollout.n"
MICRO, MODEL = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", "actor_rollout_ref.model.path"
KL_LOSS = "actor_rollout_ref.actor.kl_loss_coef (with actor_rollout_ref.actor.use_kl_loss=true)"
KL_REWARD = "algorithm.kl_ctrl.kl_coef (with algorithm.use_kl_in_reward=true)"
OTHER_TRAINER_KEYS = {
    "learning_rate": LR, "actor_learning_rate": LR, "lr": LR, "critic_learning_rate": "critic.optim.lr",
    "num_generations": N, "n_samples_per_prompt": N, "num_generations_per_prompt": N,
    "beta": KL_LOSS, "init_kl_coef": f"{KL_REWARD}, or {KL_LOSS}", "kl_coef": f"{KL_REWARD}, or {KL_LOSS}",
    "max_completion_length": "data.max_response_length", "generate_max_len": "data.max_response_length",
    "max_new_tokens": "data.max_response_length", "prompt_max_len": "data.max_prompt_length",
    "max_prompt_length": "data.max_prompt_length",
    "max_total_sequence_length": "data.max_prompt_length + data.max_response_length (set both)",
    "per_device_train_batch_size": MICRO, "micro_train_batch_size": MICRO, "train_micro_batch_size": MICRO,
    "train_batch_size": "data.train_batch_size", "rollout_batch_size": "data.train_batch_size",
    "num_prompts_per_step": "data.train_batch_size",
    "train_global_batch_size": "data.train_batch_size (prompts; each gets actor_rollout_ref.rollout.n responses)",
    "gradient_accumulation_steps": "none: dagrl derives it from actor_rollout_ref.actor.ppo_mini_batch_size and "
                                   f"{MICRO}",
    "use_vllm": "actor_rollout_ref.rollout.name=vllm",
    "vllm_gpu_memory_utilization": "actor_rollout_ref.rollout.gpu_memory_utilization",
    "model_name": MODEL, "model_name_or_path": MODEL, "pretrain": MODEL,
    "num_train_epochs": "trainer.total_epochs", "num_episodes": "trainer.total_epochs",
    "max_epochs": "actor_rollout_ref.actor.ppo_epochs", "num_iterations": "actor_rollout_ref.actor.ppo_epochs",
    "max_steps": "trainer.total_training_steps", "max_num_steps": "trainer.total_training_steps",
    "save_steps": "trainer.save_freq", "eval_steps": "trainer.test_freq",
    "output_dir": "trainer.default_local_dir", "save_path": "trainer.default_local_dir",
    "checkpoint_dir": "trainer.default_local_dir", "report_to": "trainer.logger",
    "warmup_ratio": "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio",
    "warmup_steps": "actor_rollout_ref.actor.optim.lr_warmup_steps",
    "lr_scheduler_type": "actor_rollout_ref.actor.optim.lr_decay_style",
    "max_grad_norm": "actor_rollout_ref.actor.grad_clip", "max_norm": "actor_rollout_ref.actor.grad_clip",
    "epsilon": "actor_rollout_ref.actor.clip_ratio", "eps_clip": "actor_rollout_ref.actor.clip_ratio",
    "epsilon_high": "actor_rollout_ref.actor.clip_ratio_high", "loss_type": "actor_rollout_ref.actor.loss_agg_mode",
    "scale_rewards": "algorithm.norm_adv_by_std_in_grpo", "advantage_estimator": "algorithm.adv_estimator",
    "gradient_checkpointing": "actor_rollout_ref.model.enable_gradient_checkpointing",
    "gpus_per_node": "trainer.n_gpus_per_node", "num_nodes": "trainer.nnodes",
    "colocate_all_models": "actor_rollout_ref.hybrid_engine",
    "dataset_name": "data.train_files (local parquet files)", "prompt_data": "data.train_files (local parquet files)",
    "reward_funcs": "custom_reward_function.path (a Python file defining compute_score)",
}


def other_trainer_hint(key: str, value: str, sections) -> str | None:
    """The line for `key`, an override outside dagrl's `sections`, when it is another trainer's name."""
    if key.split(".")[0] in sections:
        return None
    found = OTHER_TRAINER_KEYS.get(key) or OTHER_TRAINER_KEYS.get(key.rsplit(".", 1)[-1])
    if found is None:
        return None
    plain = " " not in found and "=" not in found  # a key alone: it takes the user's value as it is
    write = f": write {found}={value}" if plain else ""
    return f"'{key}' is not a dagrl key (another trainer's name, e.g. TRL's, OpenRLHF's or NeMo-RL's); dagrl's is " \
           f"{found}{write}"
