from __future__ import annotations

from tests.reliability.corpus.case import Case

TOPIC = "Settings another key switches off (they would be silently ignored)"
CASES: tuple[Case, ...] = (
    Case(
        "reward_name_without_path",
        "`custom_reward_function.name=my_score` with no path (the name would be ignored)",
        ("custom_reward_function.name=my_score",),
        ("custom_reward_function.name", "custom_reward_function.path"),
    ),
    Case(
        "critic_model_path_on_grpo",
        "`critic.model.path=...` on dag=grpo (no critic)",
        ("critic.model.path={model}",),
        ("critic.model.path='<model>' has no effect", "dag=ppo"),
    ),
    Case(
        "kl_loss_coef_without_kl_loss",
        "`actor.kl_loss_coef=0.01` with use_kl_loss=false",
        ("actor_rollout_ref.actor.kl_loss_coef=0.01",),
        ("has no effect", "set actor_rollout_ref.actor.use_kl_loss=true"),
    ),
    Case(
        "adaptive_kl_without_kl_in_reward",
        "`algorithm.kl_ctrl.type=adaptive` with use_kl_in_reward=false",
        ("algorithm.kl_ctrl.type=adaptive",),
        ("has no effect", "set algorithm.use_kl_in_reward=true"),
    ),
    Case(
        "min_lr_with_constant_schedule",
        "`optim.min_lr=1e-7` with lr_decay_style=constant",
        ("actor_rollout_ref.actor.optim.min_lr=1e-7",),
        ("has no effect", "lr_decay_style=cosine or linear"),
    ),
    Case(
        "loss_scale_factor_without_mode",
        "`actor.loss_scale_factor=512` with loss_agg_mode=token-mean",
        ("actor_rollout_ref.actor.loss_scale_factor=512",),
        ("has no effect", "loss_agg_mode=seq-mean-token-sum-norm"),
    ),
    Case(
        "warmup_steps_and_ratio",
        "`optim.lr_warmup_steps=3` and `lr_warmup_steps_ratio=0.1` (the ratio ignored)",
        ("actor_rollout_ref.actor.optim.lr_warmup_steps=3", "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.1"),
        ("lr_warmup_steps_ratio=0.1 has no effect", "lr_warmup_steps=-1"),
    ),
    Case(
        "gamma_with_grpo",
        "`algorithm.gamma=0.99` with adv_estimator=grpo",
        ("algorithm.gamma=0.99",),
        ("has no effect", "algorithm.adv_estimator=grpo does not discount"),
    ),
    Case(
        "val_temperature_without_sampling",
        "`val_kwargs.temperature=0.6` with val_kwargs.do_sample=false",
        ("actor_rollout_ref.rollout.val_kwargs.temperature=0.6",),
        ("has no effect", "val_kwargs.do_sample=true"),
    ),
    Case(
        "clip_cov_ratio_with_vanilla",
        "`policy_loss.clip_cov_ratio=0.01` with loss_mode=vanilla",
        ("actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.01",),
        ("has no effect", "set actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov"),
    ),
    Case(
        "loss_agg_mode_with_sapo",
        "`actor.loss_agg_mode=token-sum` with loss_mode=sapo (which fixes its own)",
        ("actor_rollout_ref.actor.policy_loss.loss_mode=sapo", "actor_rollout_ref.actor.loss_agg_mode=token-sum"),
        ("loss_agg_mode='token-sum' has no effect", "aggregates with seq-mean-token-mean"),
    ),
    Case(
        "remax_with_partial_rollout",
        "`algorithm.adv_estimator=remax` with partial rollout (its greedy baseline "
        "is made for single-turn batches only)",
        ("algorithm.adv_estimator=remax", "async_training.partial_rollout=true"),
        (
            "algorithm.adv_estimator=remax takes its baseline from one greedy response per prompt",
            "partial rollout",
            "set async_training.partial_rollout=false",
        ),
    ),
    Case(
        "passk_with_one_sample",
        "`algorithm.adv_estimator=grpo_passk` with `rollout.n=1`",
        ("actor_rollout_ref.rollout.n=1", "algorithm.adv_estimator=grpo_passk"),
        ("actor_rollout_ref.rollout.n=1", "second best", "2 or more"),
    ),
    Case(
        "test_freq_without_val_files",
        "`data.val_files=[]` with `trainer.test_freq=1` (no validation to run)",
        ("data.val_files=[]", "trainer.test_freq=1"),
        ("trainer.test_freq=1 has no effect", "data.val_files"),
    ),
    Case(
        "clip_ratio_with_low_and_high",
        "`actor.clip_ratio=0.3` with both clip_ratio_low and clip_ratio_high set",
        (
            "actor_rollout_ref.actor.clip_ratio=0.3",
            "actor_rollout_ref.actor.clip_ratio_low=0.2",
            "actor_rollout_ref.actor.clip_ratio_high=0.28",
        ),
        ("actor_rollout_ref.actor.clip_ratio=0.3 has no effect", "clip_ratio_low=0.2", "drop"),
    ),
    Case(
        "min_lr_with_min_lr_ratio",
        "`optim.min_lr=1e-7` with verl's `optim.min_lr_ratio=0.1` (one floor would be ignored)",
        (
            "actor_rollout_ref.actor.optim.lr_decay_style=cosine",
            "actor_rollout_ref.actor.optim.min_lr=1e-7",
            "actor_rollout_ref.actor.optim.min_lr_ratio=0.1",
        ),
        ("actor_rollout_ref.actor.optim.min_lr_ratio=0.1", "min_lr=1e-07", "set only"),
    ),
    Case(
        "sequence_parallel_at_tp1",
        "`megatron.sequence_parallel=true` with tensor_model_parallel_size=1",
        ("actor_rollout_ref.actor.megatron.sequence_parallel=true",),
        ("sequence_parallel=true has no effect", "tensor_model_parallel_size=1", "sequence_parallel=false"),
    ),
    Case(
        "vllm_engine_kwargs_with_hf",
        "`+rollout.engine_kwargs.vllm.swap_space=4` with the hf rollout",
        ("+actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4",),
        ("engine_kwargs.vllm has no effect", "rollout.name=hf", "rollout.name=vllm"),
    ),
    Case(
        "max_staleness_colocated",
        "`async_training.max_staleness=3` on a colocated run without partial rollout",
        ("async_training.max_staleness=3",),
        ("async_training.max_staleness=3 has no effect", "partial_rollout=true"),
    ),
    Case(
        "val_n_with_greedy_validation",
        "`val_kwargs.n=4` with greedy validation (four copies of one response)",
        ("actor_rollout_ref.rollout.val_kwargs.n=4",),
        ("val_kwargs.n=4", "val_kwargs.do_sample=false", "val_kwargs.do_sample=true"),
    ),
)
