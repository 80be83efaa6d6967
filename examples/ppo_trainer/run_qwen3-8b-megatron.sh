#!/usr/bin/env bash
# PPO (GAE with a critic) on Qwen3-8B with Megatron actor and critic (TP2 x PP4, SP, distributed optimizer) and
# vLLM rollout, 8 GPUs/node. The seed script (examples/grpo_trainer/run_qwen3-8b-megatron.sh) with these changes only:
#  - dag=ppo, algorithm.adv_estimator=gae (ALG=ppo names the run), gamma=1.0, lam=1.0;
#  - batches: TRAIN_BATCH_SIZE_PER_NODE 128 -> 512, PPO_MINI_BATCH_SIZE_PER_NODE 16 -> 128, ROLLOUT_N 8 -> 1;
#  - critic.* (verl's keys): model.path=$CRITIC_MODEL_PATH (default: the actor's model; its LM head becomes a value
#    head), enable_gradient_checkpointing=True, optim.lr=1e-5, optim.lr_warmup_steps_ratio=0.0, the actor's mini-
#    and micro-batch sizes, cliprange_value=0.5, grad_clip=1.0, and param/grad/optimizer offload, so the critic
#    stays on the host outside its own phases and the actor and vLLM keep the GPU memory they had under GRPO;
#  - trainer.critic_warmup=0; stated explicitly, equal to the defaults: algorithm.use_kl_in_reward=False,
#    actor use_kl_loss=False, actor lr 1e-6 (now $ACTOR_LR).
# The critic reuses the actor's parallel layout (TP2 x PP4, SP, distributed optimizer).
# DAGRL_DRY_RUN=1 prints the composed config; DAGRL_PLAN=1 prints the layout, batch schedule and memory estimate.
set -euo pipefail
. "$(dirname "$0")/../use_venv.sh"  # the repo's .venv when python3 lacks dagrl
# ===================================================================================
# === USER CONFIGURATION SECTION ===
# ===================================================================================
export HYDRA_FULL_ERROR=1
export DAGRL_LOG_LEVEL=${DAGRL_LOG_LEVEL:-INFO}
# --- Experiment and Model Definition ---
export DATASET=deepscaler
export ALG=ppo
export MODEL_NAME=qwen3-8b
# --- Path Definitions ---
export HOME=${HOME:-"/root"}
export TRAIN_DATA_PATH=${TRAIN_DATA_PATH:-$HOME/data/$DATASET/train.parquet}
export TEST_DATA_PATH=${TEST_DATA_PATH:-$HOME/data/$DATASET/test.parquet}
export MODEL_PATH=${MODEL_PATH:-$HOME/data/models/Qwen3-8B}
export CRITIC_MODEL_PATH=${CRITIC_MODEL_PATH:-$MODEL_PATH}
export BASE_CKPT_PATH=${BASE_CKPT_PATH:-$HOME/ckpts}
export BASE_TENSORBOARD_PATH=${BASE_TENSORBOARD_PATH:-$HOME/tensorboard}
# --- Key Training Hyperparameters ---
export TRAIN_BATCH_SIZE_PER_NODE=512
export PPO_MINI_BATCH_SIZE_PER_NODE=128
export PPO_MICRO_BATCH_SIZE_PER_GPU=8
export MAX_PROMPT_LENGTH=1024
export MAX_RESPONSE_LENGTH=2048
export ROLLOUT_GPU_MEMORY_UTILIZATION=0.45
export ROLLOUT_N=1
export ACTOR_LR=1e-6
export CRITIC_LR=1e-5
export CRITIC_WARMUP=0
export GAMMA=1.0
export LAM=1.0
export CLIPRANGE_VALUE=0.5
export SAVE_FREQ=30
export TEST_FREQ=10
export TOTAL_EPOCHS=30
export MAX_CKPT_KEEP=5
# ---- Megatron Parallelism Configuration (actor, reference and critic share it) ----
export ACTOR_REF_TP=2
export ACTOR_REF_PP=4
export ACTOR_REF_CP=1
export ACTOR_REF_SP=True
# --- Distributed Training & Infrastructure ---
export N_GPUS_PER_NODE=${N_GPUS_PER_NODE:-8}
export NNODES=${PET_NNODES:-1}
export NODE_RANK=${PET_NODE_RANK:-0}
export MASTER_ADDR=${MASTER_ADDR:-localhost}
export MASTER_PORT=${MASTER_PORT:-29500}
# --- Output Paths and Experiment Naming ---
timestamp=$(date +"%Y%m%d_%H%M%S")
export CKPT_PATH=${BASE_CKPT_PATH}/${MODEL_NAME}_${ALG}_${DATASET}_megatron_${NNODES}nodes
export PROJECT_NAME=dagrl_${DATASET}_${ALG}
export EXPERIMENT_NAME=dagrl_${MODEL_NAME}_${ALG}_${DATASET}_megatron_experiment
export TENSORBOARD_DIR=${BASE_TENSORBOARD_PATH}/${MODEL_NAME}_${ALG}_${DATASET}_megatron_tensorboard/dlc_${NNODES}_$timestamp
# --- Calculated Global Hyperparameters ---
export TRAIN_BATCH_SIZE=$(($TRAIN_BATCH_SIZE_PER_NODE * $NNODES))
export PPO_MINI_BATCH_SIZE=$(($PPO_MINI_BATCH_SIZE_PER_NODE * $NNODES))
# --- Define the Training Command and its Arguments ---
TRAINING_CMD=(
    -m dagrl.main_dag
    dag=ppo
    algorithm.adv_estimator=gae
    algorithm.gamma=$GAMMA
    algorithm.lam=$LAM
    algorithm.use_kl_in_reward=False
    data.train_files=$TRAIN_DATA_PATH
    data.val_files=$TEST_DATA_PATH
    data.train_batch_size=$TRAIN_BATCH_SIZE
    data.max_prompt_length=$MAX_PROMPT_LENGTH
    data.max_response_length=$MAX_RESPONSE_LENGTH
    data.filter_overlong_prompts=True
    actor_rollout_ref.model.path=$MODEL_PATH
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    actor_rollout_ref.actor.strategy=megatron
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=$ACTOR_REF_TP
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=$ACTOR_REF_PP
    actor_rollout_ref.actor.megatron.context_parallel_size=$ACTOR_REF_CP
    actor_rollout_ref.actor.megatron.sequence_parallel=$ACTOR_REF_SP
    actor_rollout_ref.actor.megatron.use_distributed_optimizer=True
    actor_rollout_ref.actor.megatron.param_dtype=bfloat16
    actor_rollout_ref.actor.megatron.param_offload=False
    actor_rollout_ref.actor.optim.lr=$ACTOR_LR
    actor_rollout_ref.actor.ppo_mini_batch_size=$PPO_MINI_BATCH_SIZE
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$PPO_MICRO_BATCH_SIZE_PER_GPU
    actor_rollout_ref.actor.use_kl_loss=False
    actor_rollout_ref.actor.grad_clip=1.0
    actor_rollout_ref.rollout.tensor_model_parallel_size=$ACTOR_REF_TP
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.gpu_memory_utilization=$ROLLOUT_GPU_MEMORY_UTILIZATION
    actor_rollout_ref.rollout.n=$ROLLOUT_N
    actor_rollout_ref.rollout.prompt_length=$MAX_PROMPT_LENGTH
    actor_rollout_ref.rollout.response_length=$MAX_RESPONSE_LENGTH
    critic.strategy=megatron
    critic.model.path=$CRITIC_MODEL_PATH
    critic.model.enable_gradient_checkpointing=True
    critic.optim.lr=$CRITIC_LR
    critic.optim.lr_warmup_steps_ratio=0.0
    critic.ppo_mini_batch_size=$PPO_MINI_BATCH_SIZE
    critic.ppo_micro_batch_size_per_gpu=$PPO_MICRO_BATCH_SIZE_PER_GPU
    critic.cliprange_value=$CLIPRANGE_VALUE
    critic.grad_clip=1.0
    critic.megatron.param_offload=True
    critic.megatron.grad_offload=True
    critic.megatron.optimizer_offload=True
    trainer.critic_warmup=$CRITIC_WARMUP
    trainer.logger=['console','tensorboard']
    trainer.project_name=$PROJECT_NAME
    trainer.experiment_name=$EXPERIMENT_NAME
    trainer.n_gpus_per_node=$N_GPUS_PER_NODE
    trainer.nnodes=$NNODES
    trainer.save_freq=$SAVE_FREQ
    trainer.test_freq=$TEST_FREQ
    trainer.total_epochs=$TOTAL_EPOCHS
    trainer.resume_mode=auto
    trainer.max_actor_ckpt_to_keep=$MAX_CKPT_KEEP
    trainer.default_local_dir=$CKPT_PATH
    trainer.val_before_train=True
)
# One process per GPU on every node; run this script on each node with PET_NODE_RANK set.
if [ "${DAGRL_DRY_RUN:-0}" = 1 ]; then
    exec python3 "${TRAINING_CMD[@]}" "$@" --cfg job  # flags after every override: argparse takes no positionals after them
fi
if [ "${DAGRL_PLAN:-0}" = 1 ]; then
    exec python3 -m dagrl.plan "${TRAINING_CMD[@]:2}" "$@"
fi
# every input check once, in one process: from torchrun, each rank would print the same lines, then its traceback
WORLD_SIZE=$((NNODES * N_GPUS_PER_NODE)) DAGRL_CHECK_ONLY=1 python3 "${TRAINING_CMD[@]}" "$@"
# DAGRL_DOCTOR=1: python3 -m dagrl.doctor instead of training, launched as the run is (its layout, its ranks)
if [ "${DAGRL_DOCTOR:-0}" = 1 ]; then TRAINING_CMD[1]=dagrl.doctor; fi
exec torchrun --nnodes "$NNODES" --node-rank "$NODE_RANK" --nproc-per-node "$N_GPUS_PER_NODE" \
    --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" "${TRAINING_CMD[@]}" "$@"
