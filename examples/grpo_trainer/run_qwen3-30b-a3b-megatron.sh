#!/usr/bin/env bash
# GRPO on Qwen3-30B-A3B (MoE: 128 experts, top-8) with the Megatron actor and vLLM rollout, 8 GPUs/node.
# The seed script (examples/grpo_trainer/run_qwen3-8b-megatron.sh) with these changes only:
#  - model Qwen3-30B-A3B; layout TP2 x PP4 -> TP4 x PP1 (+ SP) for attention, EP8 x expert-TP1 for the experts
#    (16 experts per GPU); rollout TP follows (4);
#  - TRAIN_BATCH_SIZE_PER_NODE 128 -> 64, PPO_MICRO_BATCH_SIZE_PER_GPU 8 -> 4, new
#    rollout.log_prob_micro_batch_size_per_gpu=8, ROLLOUT_GPU_MEMORY_UTILIZATION 0.45 -> 0.5, MAX_CKPT_KEEP 5 -> 3;
#  - model.enable_gradient_checkpointing dropped for selective recompute of the norms and the expert activation,
#    plus the alltoall token dispatcher and grouped GEMM (override_transformer_config);
#  - actor param/grad/optimizer offload on (ACTOR_OFFLOAD=True): the state goes to the host while vLLM generates
#    (one node; on two or more, the distributed optimizer shards the expert state over expert-DP and the offload
#    can be dropped).
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
export ALG=grpo
export MODEL_NAME=qwen3-30b-a3b
# --- Path Definitions ---
export HOME=${HOME:-"/root"}
export TRAIN_DATA_PATH=${TRAIN_DATA_PATH:-$HOME/data/$DATASET/train.parquet}
export TEST_DATA_PATH=${TEST_DATA_PATH:-$HOME/data/$DATASET/test.parquet}
export MODEL_PATH=${MODEL_PATH:-$HOME/data/models/Qwen3-30B-A3B}
export BASE_CKPT_PATH=${BASE_CKPT_PATH:-$HOME/ckpts}
export BASE_TENSORBOARD_PATH=${BASE_TENSORBOARD_PATH:-$HOME/tensorboard}
# --- Key Training Hyperparameters ---
export TRAIN_BATCH_SIZE_PER_NODE=64
export PPO_MINI_BATCH_SIZE_PER_NODE=16
export PPO_MICRO_BATCH_SIZE_PER_GPU=4
export LOG_PROB_MICRO_BATCH_SIZE_PER_GPU=8
export MAX_PROMPT_LENGTH=1024
export MAX_RESPONSE_LENGTH=2048
export ROLLOUT_GPU_MEMORY_UTILIZATION=0.5
export ROLLOUT_N=8
export SAVE_FREQ=30
export TEST_FREQ=10
export TOTAL_EPOCHS=30
export MAX_CKPT_KEEP=3
# ---- Megatron Parallelism Configuration ----
export ACTOR_REF_TP=4              # attention: Qwen3-30B-A3B has 4 KV heads, so TP is 1, 2 or 4
export ACTOR_REF_PP=1
export ACTOR_REF_CP=1
export ACTOR_REF_SP=True           # Megatron needs sequence parallelism for MoE with TP > 1
export ACTOR_REF_EP=8              # experts spread over 8 GPUs (EP x expert-TP must divide GPUs / (PP x CP))
export ACTOR_REF_ETP=1             # each expert whole on one GPU
export ACTOR_OFFLOAD=${ACTOR_OFFLOAD:-True}
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
MCORE_OVERRIDE=actor_rollout_ref.actor.megatron.override_transformer_config
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
    actor_rollout_ref.actor.strategy=megatron
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=$ACTOR_REF_TP
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=$ACTOR_REF_PP
    actor_rollout_ref.actor.megatron.context_parallel_size=$ACTOR_REF_CP
    actor_rollout_ref.actor.megatron.sequence_parallel=$ACTOR_REF_SP
    actor_rollout_ref.actor.megatron.expert_model_parallel_size=$ACTOR_REF_EP
    actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=$ACTOR_REF_ETP
    actor_rollout_ref.actor.megatron.use_distributed_optimizer=True
    actor_rollout_ref.actor.megatron.param_dtype=bfloat16
    actor_rollout_ref.actor.megatron.param_offload=$ACTOR_OFFLOAD
    actor_rollout_ref.actor.megatron.grad_offload=$ACTOR_OFFLOAD
    actor_rollout_ref.actor.megatron.optimizer_offload=$ACTOR_OFFLOAD
    +$MCORE_OVERRIDE.moe_token_dispatcher_type=alltoall
    +$MCORE_OVERRIDE.moe_grouped_gemm=True
    +$MCORE_OVERRIDE.recompute_granularity=selective
    "+$MCORE_OVERRIDE.recompute_modules=[layernorm,moe_act]"
    actor_rollout_ref.actor.optim.lr=1e-6
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
    "trainer.logger=['console','tensorboard']"
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
