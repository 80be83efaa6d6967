#!/usr/bin/env bash
# GRPO on GPUs with the vLLM rollout: SmolLM2-135M-Instruct learns small-number addition.
# Written for dagrl, not derived from the siiRL seed script (examples/grpo_trainer/run_qwen3-8b-megatron.sh).
# Megatron actor TP=1 (SmolLM2's 3 KV heads allow no TP=2) x DP=NGPUS; one vLLM engine per GPU (rollout TP=1),
# colocated with the actor in the same processes. Data: examples/data_preprocess/arithmetic.py.
# Extra dotted overrides given to this script are appended.
set -euo pipefail
. "$(dirname "$0")/../use_venv.sh"  # the repo's .venv when python3 lacks dagrl

MODEL_PATH=${MODEL_PATH:-$HOME/models/SmolLM2-135M-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/arithmetic}
CKPT_DIR=${CKPT_DIR:-$HOME/ckpts/smollm2-135m_grpo_arithmetic_vllm}
NGPUS=${NGPUS:-2}
SEED=${SEED:-0}

TRAINING_CMD=(-m dagrl.main_dag
    algorithm.adv_estimator=grpo
    data.train_files="$DATA_DIR/train.parquet"
    data.val_files="$DATA_DIR/test.parquet"
    data.train_batch_size=32
    data.max_prompt_length=64
    data.max_response_length=12
    data.filter_overlong_prompts=True
    data.seed="$SEED"
    actor_rollout_ref.model.path="$MODEL_PATH"
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1
    actor_rollout_ref.actor.megatron.seed="$SEED"
    actor_rollout_ref.actor.megatron.param_dtype=bfloat16
    actor_rollout_ref.actor.optim.lr=1e-5
    actor_rollout_ref.actor.ppo_mini_batch_size=32
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64
    actor_rollout_ref.actor.grad_clip=1.0
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.tensor_model_parallel_size=1
    actor_rollout_ref.rollout.gpu_memory_utilization=0.3
    actor_rollout_ref.rollout.calculate_log_probs=True
    actor_rollout_ref.rollout.n=8
    actor_rollout_ref.rollout.temperature=1.0
    actor_rollout_ref.rollout.seed="$SEED"
    trainer.logger='[console,jsonl]'
    trainer.project_name=dagrl_gpu
    trainer.experiment_name="smollm2-135m_grpo_arithmetic_vllm_seed$SEED"
    trainer.n_gpus_per_node="$NGPUS"
    trainer.nnodes=1
    trainer.total_epochs=4
    trainer.test_freq=4
    trainer.save_freq=-1
    trainer.val_before_train=True
    trainer.resume_mode=auto
    trainer.default_local_dir="$CKPT_DIR"
)

# DAGRL_DRY_RUN=1 prints the composed config; DAGRL_PLAN=1 the layout, schedule and memory estimate.
if [ "${DAGRL_DRY_RUN:-0}" = 1 ]; then
    exec python3 "${TRAINING_CMD[@]}" "$@" --cfg job  # flags after every override: argparse takes no positionals after them
fi
if [ "${DAGRL_PLAN:-0}" = 1 ]; then
    exec python3 -m dagrl.plan "${TRAINING_CMD[@]:2}" "$@"
fi
# every input check once, in one process: from torchrun, each rank would print the same lines, then its traceback
WORLD_SIZE=$NGPUS DAGRL_CHECK_ONLY=1 python3 "${TRAINING_CMD[@]}" "$@"
# DAGRL_DOCTOR=1: python3 -m dagrl.doctor instead of training, launched as the run is (its layout, its ranks)
if [ "${DAGRL_DOCTOR:-0}" = 1 ]; then TRAINING_CMD[1]=dagrl.doctor; fi
exec python3 -m torch.distributed.run --nproc-per-node "$NGPUS" "${TRAINING_CMD[@]}" "$@"
