#!/usr/bin/env bash
# verl 0.9.1 (FSDP backend, vLLM rollout) on the job of examples/grpo_trainer/run_smollm2-135m-vllm.sh: SmolLM2-135M-
# Instruct GRPO on the arithmetic task, 32 prompts x 8, responses <= 12 tokens, lr 1e-5, clip 1.0, KL off, T=1,
# greedy held-out every 4 steps. Run on the GPU machine with verl installed apart (README.md); extra overrides appended
# (the last value of a key wins). Without flash-attn: sdpa attention and no remove-padding. trainer.use_v1=False:
# TransferQueue is not carried. Keys whose verl default differs from dagrl's are set to dagrl's value (README.md,
# "Settings"): seeds, gradient checkpointing off, eager vLLM, max_num_seqs 1024, max_model_len = prompt + response.
# use_fused_kernels: verl's own way around its per-token log-prob loop when flash-attn is missing (README.md).
set -euo pipefail
MODEL_PATH=${MODEL_PATH:-$HOME/models/SmolLM2-135M-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/arithmetic}
NGPUS=${NGPUS:-1}
SEED=${SEED:-0}
HERE=$(cd "$(dirname "$0")" && pwd)
exec python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo algorithm.use_kl_in_reward=False algorithm.norm_adv_by_std_in_grpo=True \
    data.train_files="$DATA_DIR/train.parquet" data.val_files="$DATA_DIR/test.parquet" data.seed="$SEED" \
    data.train_batch_size=32 data.max_prompt_length=64 data.max_response_length=12 data.filter_overlong_prompts=True \
    actor_rollout_ref.model.path="$MODEL_PATH" actor_rollout_ref.model.use_remove_padding=False \
    actor_rollout_ref.model.enable_gradient_checkpointing=False actor_rollout_ref.model.use_fused_kernels=True \
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa \
    actor_rollout_ref.actor.optim.lr=1e-5 actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64 actor_rollout_ref.actor.grad_clip=1.0 \
    actor_rollout_ref.actor.clip_ratio=0.2 actor_rollout_ref.actor.loss_agg_mode=token-mean \
    actor_rollout_ref.actor.use_kl_loss=False actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.fsdp_config.seed="$SEED" actor_rollout_ref.actor.data_loader_seed="$SEED" \
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.3 actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 actor_rollout_ref.rollout.top_p=1.0 actor_rollout_ref.rollout.top_k=-1 \
    actor_rollout_ref.rollout.seed="$SEED" actor_rollout_ref.rollout.calculate_log_probs=True \
    actor_rollout_ref.rollout.enforce_eager=True actor_rollout_ref.rollout.max_num_seqs=1024 \
    actor_rollout_ref.rollout.max_model_len=76 actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.rollout.val_kwargs.do_sample=False actor_rollout_ref.rollout.val_kwargs.temperature=0 \
    reward.custom_reward_function.path="$HERE/arithmetic_reward.py" reward.custom_reward_function.name=compute_score \
    trainer.use_v1=False trainer.logger='[console]' trainer.project_name=verl_vs_dagrl \
    trainer.experiment_name=smollm2_arithmetic trainer.n_gpus_per_node="$NGPUS" trainer.nnodes=1 \
    trainer.total_epochs=4 trainer.test_freq=4 trainer.save_freq=-1 trainer.val_before_train=True "$@"
