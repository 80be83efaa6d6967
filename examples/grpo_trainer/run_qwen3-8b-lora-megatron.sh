#!/usr/bin/env bash
# GRPO on Qwen3-8B with LoRA adapters on ONE GPU: the Megatron actor (TP1, frozen bf16 base, rank-32 adapters) and a
# vLLM engine colocated on the same GPU. The seed script (examples/grpo_trainer/run_qwen3-8b-megatron.sh) with these
# changes only:
#  - one GPU: N_GPUS_PER_NODE 8 -> 1, actor TP2 x PP4 with SP -> TP1 x PP1, rollout TP2 -> TP1;
#  - LoRA (verl's Megatron keys): actor_rollout_ref.model.lora.rank=32, alpha=64, every linear (the default
#    target_modules), merge=False: after each update only the adapter (~0.18 GB in bf16) goes to vLLM, which
#    serves it on the base it loaded once; docs/lora.md and docs/lora_sync.md;
#  - actor lr 1e-6 -> 1e-5 (adapters want a higher rate than full fine-tuning; verl's LoRA examples use ~10x);
#  - batches per node (one GPU): TRAIN_BATCH_SIZE_PER_NODE 128 -> 32 (256 responses a step), micro-batches of 4
#    for the update (PPO_MICRO_BATCH_SIZE_PER_GPU 8 -> 4) and the log-prob pass (the key added, 16 by default):
#    a 3k-token row's logits over Qwen3's 152k-entry vocabulary take 1.7 GiB in fp32;
#  - ROLLOUT_GPU_MEMORY_UTILIZATION 0.45 -> 0.5; MODEL_NAME qwen3-8b -> qwen3-8b-lora (its own checkpoint and
#    TensorBoard directories: a full fine-tuning checkpoint is never resumed as a LoRA run).
# DAGRL_PLAN=1 prints the memory plan: on an 80 GB GPU its peak is the rollout, 58.5 GiB (the actor's bf16 base,
# 15.4, beside vLLM's 40); trained in full, the same model needs the seed script's 8 GPUs.
set -euo pipefail
. "$(dirname "$0")/../use_venv.sh"  # the repo's .venv when python3 lacks dagrl
# ===================================================================================
# === USER CONFIGURATION SECTION ===
# ===================================================================================
export HYDRA_FULL_ERROR=1
export DAGRL_LOG_LEVEL=${DAGRL_LOG_LEVEL:-INFO}
# --- Experiment and Model Definition ---
export DATASET=deepscaler
export ALG=grpo
export MODEL_NAME=qwen3-8b-lora
# --- Path Definitions ---
export HOME=${HOME:-"/root"}
export TRAIN_DATA_PATH=${TRAIN_DATA_PATH:-$HOME/data/$DATASET/train.parquet}
export TEST_DATA_PATH=${TEST_DATA_PATH:-$HOME/data/$DATASET/test.parquet}
export MODEL_PATH=${MODEL_PATH:-$HOME/data/models/Qwen3-8B}
export BASE_CKPT_PATH=${BASE_CKPT_PATH:-$HOME/ckpts}
export BASE_TENSORBOARD_PATH=${BASE_TENSORBOARD_PATH:-$HOME/tensorboard}
# --- Key Training Hyperparameters ---
export TRAIN_BATCH_SIZE_PER_NODE=32
export PPO_MINI_BATCH_SIZE_PER_NODE=16
export PPO_MICRO_BATCH_SIZE_PER_GPU=4
export LOG_PROB_MICRO_BATCH_SIZE_PER_GPU=4
export MAX_PROMPT_LENGTH=1024
export MAX_RESPONSE_LENGTH=2048
export ROLLOUT_GPU_MEMORY_UTILIZATION=0.5
export ROLLOUT_N=8
export SAVE_FREQ=30
export TEST_FREQ=10
export TOTAL_EPOCHS=30
export MAX_CKPT_KEEP=5
# ---- Megatron Parallelism Configuration ----
export ACTOR_REF_TP=1
export ACTOR_REF_PP=1
export ACTOR_REF_CP=1
export ACTOR_REF_SP=False
export LORA_RANK=32
export LORA_ALPHA=64
# --- Distributed Training & Infrastructure ---
export N_GPUS_PER_NODE=${N_GPUS_PER_NODE:-1}
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
    algorithm.adv_estimator=$ALG
    data.train_files=$TRAIN_DATA_PATH
    data.val_files=$TEST_DATA_PATH
    data.train_batch_size=$TRAIN_BATCH_SIZE
    data.max_prompt_length=$MAX_PROMPT_LENGTH
    data.max_response_length=$MAX_RESPONSE_LENGTH
    data.filter_overlong_prompts=True
    actor_rollout_ref.model.path=$MODEL_PATH
    actor_rollout_ref.model.enable_gradient_checkpointing=True
    actor_rollout_ref.model.lora.rank=$LORA_RANK
    actor_rollout_ref.model.lora.alpha=$LORA_ALPHA
    actor_rollout_ref.model.lora.merge=False
    actor_rollout_ref.actor.strategy=megatron
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=$ACTOR_REF_TP
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=$ACTOR_REF_PP
    actor_rollout_ref.actor.megatron.context_parallel_size=$ACTOR_REF_CP
    actor_rollout_ref.actor.megatron.sequence_parallel=$ACTOR_REF_SP
    actor_rollout_ref.actor.megatron.use_distributed_optimizer=True
    actor_rollout_ref.actor.megatron.param_dtype=bfloat16
    actor_rollout_ref.actor.megatron.param_offload=False
    actor_rollout_ref.actor.optim.lr=1e-5
    actor_rollout_ref.actor.ppo_mini_batch_size=$PPO_MINI_BATCH_SIZE
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$PPO_MICRO_BATCH_SIZE_PER_GPU
    actor_rollout_ref.actor.grad_clip=1.0
    actor_rollout_ref.rollout.tensor_model_parallel_size=$ACTOR_REF_TP
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.gpu_memory_utilization=$ROLLOUT_GPU_MEMORY_UTILIZATION
    actor_rollout_ref.rollout.n=$ROLLOUT_N
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$LOG_PROB_MICRO_BATCH_SIZE_PER_GPU
    actor_rollout_ref.rollout.prompt_length=$MAX_PROMPT_LENGTH
    actor_rollout_ref.rollout.response_length=$MAX_RESPONSE_LENGTH
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
# DAGRL_DRY_RUN=1 prints the composed config instead of training; DAGRL_PLAN=1 prints the layout, batch schedule
# and per-GPU memory estimate (python3 -m dagrl.plan).
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
