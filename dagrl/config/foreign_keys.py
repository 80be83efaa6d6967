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

# verl's on-policy distillation serves the teacher from its own inference pool and offers supervised top-k losses;
# dagrl's teacher is a frozen Megatron model in the training processes, its KL a per-token reward
TEACHER = "dagrl's teacher is a frozen Megatron model in the training processes (the actor's layout), not a server"
MORE_VERL_KEYS.update(
    {
        "distillation.num_workers": f"{TEACHER}; drop the key",
        "distillation.teacher_model.enable_resource_pool": f"{TEACHER}; drop the key",
        "distillation.teacher_model.n_gpus_per_node": f"{TEACHER}; drop the key",
        "distillation.teacher_model.nnodes": f"{TEACHER}; drop the key",
        "distillation.teacher_model.inference": f"{TEACHER}: its forward micro-batch is "
        "distillation.teacher_model.log_prob_micro_batch_size_per_gpu; "
        "drop the key",
        "distillation.distillation_loss.topk": "dagrl's distillation reads the sampled tokens' log-probs only (the "
        "distillation_loss.loss_mode estimators), not the teacher's top-k; "
        "drop the key",
        "distillation.distillation_loss.policy_loss_mode": "the distillation term trains through "
        "actor_rollout_ref.actor.policy_loss.loss_mode with the task's; "
        "drop the key",
    }
)
MORE_VERL_KEYS.update(
    {
        f"distillation.distillation_loss.{name}": f"the distillation term is clipped with the task's "
        f"policy loss, by actor_rollout_ref.actor.{name}; drop the key"
        for name in ("clip_ratio", "clip_ratio_low", "clip_ratio_high")
    }
)

# verl's rollout correction (algorithm.rollout_correction.*, verl/trainer/config/algorithm/rollout_correction.yaml):
# dagrl's exact counterparts are the token-level truncated IS cap and the geometric sequence band
TIS, LOW, HIGH = (
    "actor_rollout_ref.actor.tis_imp_ratio_cap",
    "actor_rollout_ref.actor.mis_ratio_low",
    "actor_rollout_ref.actor.mis_ratio_high",
)
LOG_PROBS, CORRECTION = "actor_rollout_ref.rollout.calculate_log_probs=true", "algorithm.rollout_correction"
MORE_VERL_KEYS.update(
    {
        CORRECTION: f"dagrl's off-policy corrections are {TIS} (rollout_is=token), {LOW} / {HIGH} "
        f"(rollout_rs=seq_mean_k1) and actor_rollout_ref.actor.policy_loss.off_policy=decoupled, each with "
        f"{LOG_PROBS}; drop the key",
        f"{CORRECTION}.rollout_is": f"rollout_is=token with rollout_is_threshold=C is {TIS}=C (with {LOG_PROBS}); "
        f"sequence-level IS is not supported; drop the key",
        f"{CORRECTION}.rollout_is_threshold": f"a single cap C of rollout_is=token is {TIS}=C; IcePop's 'lower_upper' "
        f"band is not supported; drop the key",
        f"{CORRECTION}.rollout_rs": f"rollout_rs=seq_mean_k1 with rollout_rs_threshold='L_U' is {LOW}=1/U {HIGH}=1/L "
        f"(dagrl bounds pi_old/pi_rollout, verl's k1 its log-inverse); other rejection "
        f"options are not supported; drop the key",
        f"{CORRECTION}.rollout_rs_threshold": f"with rollout_rs=seq_mean_k1, 'L_U' (or U alone: L = 1/U) is {LOW}=1/U "
        f"{HIGH}=1/L; drop the key",
        f"{CORRECTION}.bypass_mode": "dagrl always recomputes pi_old in the trainer (verl's bypass_mode=false); drop "
        "the key",
        f"{CORRECTION}.loss_type": "bypass mode's losses are not supported; the policy loss is "
        "actor_rollout_ref.actor.policy_loss.loss_mode; drop the key",
        f"{CORRECTION}.rollout_is_batch_normalize": f"{TIS}'s weights are not normalized to mean 1 (not supported); "
        f"drop the key",
    }
)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def rollout_correction_hint(key: str, value: str) -> str | None:
    """The dagrl overrides that do exactly what `key=value` of verl's rollout correction does; None where none
    do (the key's MORE_VERL_KEYS line answers then)."""
    name, value = key.removeprefix(CORRECTION + "."), value.strip("'\"")
    if name == "rollout_is" and value == "token":
        return f"write {TIS}=C for its rollout_is_threshold C (verl's default 2), with {LOG_PROBS}"
    if name == "rollout_rs" and value == "seq_mean_k1":
        return f"write {LOW}=1/U {HIGH}=1/L for its rollout_rs_threshold 'L_U', with {LOG_PROBS}"
    if name == "rollout_is_threshold" and (_number(value) or 0) >= 1:  # dagrl's cap is >= 1
        return f"with rollout_is=token write {TIS}={value} (with {LOG_PROBS})"
    if name == "rollout_rs_threshold":  # verl's k1 band 'L_U', or 'U' for L = 1/U
        upper = _number(value.split("_", 1)[-1])
        lower = _number(value.split("_", 1)[0]) if "_" in value else upper and 1 / upper
        if lower and upper and 0 < lower < 1 < upper:  # dagrl's band must hold 1
            return (
                f"with rollout_rs=seq_mean_k1 write {LOW}={1 / upper:.10g} {HIGH}={1 / lower:.10g} (with {LOG_PROBS})"
            )
    return None


# TransformerConfig fields that other trainers take beside their layout keys (ROLL's strategy_config, Megatron-LM's
# flags): dagrl passes every such field through override_transformer_config, so the line writes that override with
# the user's value. A row says what dagrl does with the field; any other field of TransformerConfig under
# actor_rollout_ref.actor.megatron gets the same line without one.
MEGATRON = "actor_rollout_ref.actor.megatron"
TRANSFORMER_CONFIG_KEYS = {
    "moe_token_dispatcher_type": "allgather | alltoall | flex; dagrl's default is alltoall on GPU, allgather on CPU",
    "moe_grouped_gemm": "dagrl's default is on where TransformerEngine is installed (TEGroupedMLP)",
    "moe_layer_recompute": "recomputes the MoE layers; not with full recompute",
    "recompute_granularity": "full | selective; full recompute of every layer is also "
    "actor_rollout_ref.model.enable_gradient_checkpointing=true",
    "recompute_method": "uniform | block, with recompute_granularity=full",
    "recompute_num_layers": "with recompute_granularity=full",
    "recompute_modules": "with recompute_granularity=selective",
}


def transformer_config_hint(key: str, value: str) -> str | None:
    """The line for `key` = actor_rollout_ref.actor.megatron.<a TransformerConfig field> that dagrl does not declare
    itself; None for any other key."""
    name = key.removeprefix(MEGATRON + ".")
    if name == key or "." in name:
        return None
    if name == "deterministic_mode":
        return (
            f"'{key}' is not a dagrl key: dagrl's switch is {MEGATRON}.use_deterministic_algorithms=true "
            f"(deterministic_mode, with torch's deterministic algorithms and the launch environment it needs)"
        )
    if name not in TRANSFORMER_CONFIG_KEYS:
        from dagrl.config.megatron_fields import transformer_config_fields

        if name not in (transformer_config_fields() or ()):
            return None
    note = TRANSFORMER_CONFIG_KEYS.get(name)
    return (
        f"'{key}' is a field of megatron.core's TransformerConfig, not a dagrl key: write "
        f"+{MEGATRON}.override_transformer_config.{name}={value}" + (f" ({note})" if note else "")
    )


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
    "learning_rate": LR,
    "actor_learning_rate": LR,
    "lr": LR,
    "critic_learning_rate": "critic.optim.lr",
    "num_generations": N,
    "n_samples_per_prompt": N,
    "num_generations_per_prompt": N,
    "beta": KL_LOSS,
    "init_kl_coef": f"{KL_REWARD}, or {KL_LOSS}",
    "kl_coef": f"{KL_REWARD}, or {KL_LOSS}",
    "max_completion_length": "data.max_response_length",
    "generate_max_len": "data.max_response_length",
    "max_new_tokens": "data.max_response_length",
    "prompt_max_len": "data.max_prompt_length",
    "max_prompt_length": "data.max_prompt_length",
    "max_total_sequence_length": "data.max_prompt_length + data.max_response_length (set both)",
    "per_device_train_batch_size": MICRO,
    "micro_train_batch_size": MICRO,
    "train_micro_batch_size": MICRO,
    "train_batch_size": "data.train_batch_size",
    "rollout_batch_size": "data.train_batch_size",
    "num_prompts_per_step": "data.train_batch_size",
    "train_global_batch_size": "data.train_batch_size (prompts; each gets actor_rollout_ref.rollout.n responses)",
    "gradient_accumulation_steps": "none: dagrl derives it from actor_rollout_ref.actor.ppo_mini_batch_size and "
    f"{MICRO}",
    "use_vllm": "actor_rollout_ref.rollout.name=vllm",
    "vllm_gpu_memory_utilization": "actor_rollout_ref.rollout.gpu_memory_utilization",
    "model_name": MODEL,
    "model_name_or_path": MODEL,
    "pretrain": MODEL,
    "num_train_epochs": "trainer.total_epochs",
    "num_episodes": "trainer.total_epochs",
    "max_epochs": "actor_rollout_ref.actor.ppo_epochs",
    "num_iterations": "actor_rollout_ref.actor.ppo_epochs",
    "max_steps": "trainer.total_training_steps",
    "max_num_steps": "trainer.total_training_steps",
    "save_steps": "trainer.save_freq",
    "eval_steps": "trainer.test_freq",
    "output_dir": "trainer.default_local_dir",
    "save_path": "trainer.default_local_dir",
    "checkpoint_dir": "trainer.default_local_dir",
    "report_to": "trainer.logger",
    "warmup_ratio": "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio",
    "warmup_steps": "actor_rollout_ref.actor.optim.lr_warmup_steps",
    "lr_scheduler_type": "actor_rollout_ref.actor.optim.lr_decay_style",
    "max_grad_norm": "actor_rollout_ref.actor.grad_clip",
    "max_norm": "actor_rollout_ref.actor.grad_clip",
    "epsilon": "actor_rollout_ref.actor.clip_ratio",
    "eps_clip": "actor_rollout_ref.actor.clip_ratio",
    "epsilon_high": "actor_rollout_ref.actor.clip_ratio_high",
    "loss_type": "actor_rollout_ref.actor.loss_agg_mode",
    "scale_rewards": "algorithm.norm_adv_by_std_in_grpo",
    "advantage_estimator": "algorithm.adv_estimator",
    "gradient_checkpointing": "actor_rollout_ref.model.enable_gradient_checkpointing",
    "gpus_per_node": "trainer.n_gpus_per_node",
    "num_nodes": "trainer.nnodes",
    "colocate_all_models": "actor_rollout_ref.hybrid_engine",
    "dataset_name": "data.train_files (local parquet files)",
    "prompt_data": "data.train_files (local parquet files)",
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
    return (
        f"'{key}' is not a dagrl key (another trainer's name, e.g. TRL's, OpenRLHF's or NeMo-RL's); dagrl's is "
        f"{found}{write}"
    )
