#!/usr/bin/env bash
# GRPO on a CPU box: SmolLM2-135M-Instruct learns small-number addition (the quickstart).
# Written for dagrl, not derived from the siiRL seed script (examples/grpo_trainer/run_qwen3-8b-megatron.sh).
# Needs: python3 scripts/smollm2_to_hf.py (model) and python3 examples/data_preprocess/arithmetic.py (data).
# Extra dotted overrides given to this script are appended (e.g. trainer.total_epochs=1).
# DAGRL_DOCTOR=1 checks the install and the model's numerics at this run's layout instead of training
# (python3 -m dagrl.doctor, seconds); DAGRL_PLAN=1 prints the run's plan (python3 -m dagrl.plan).
set -euo pipefail
. "$(dirname "$0")/../use_venv.sh"  # the repo's .venv when python3 lacks dagrl

MODEL_PATH=${MODEL_PATH:-$HOME/models/SmolLM2-135M-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/arithmetic}
CKPT_DIR=${CKPT_DIR:-$HOME/ckpts/smollm2-135m_grpo_arithmetic_cpu}
SEED=${SEED:-0}
MODULE=dagrl.main_dag
if [ "${DAGRL_DOCTOR:-0}" = 1 ]; then MODULE=dagrl.doctor; fi
if [ "${DAGRL_PLAN:-0}" = 1 ]; then MODULE=dagrl.plan; fi

python3 -m "$MODULE" \
    algorithm.adv_estimator=grpo \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.train_batch_size=16 \
    data.max_prompt_length=64 \
    data.max_response_length=12 \
    data.filter_overlong_prompts=True \
    data.seed="$SEED" \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    actor_rollout_ref.model.trainable_top_layers=4 \
    actor_rollout_ref.actor.strategy=megatron \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1 \
    actor_rollout_ref.actor.megatron.seed="$SEED" \
    actor_rollout_ref.actor.megatron.param_dtype=auto \
    actor_rollout_ref.actor.optim.lr=3e-5 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32 \
    actor_rollout_ref.actor.grad_clip=1.0 \
    actor_rollout_ref.rollout.name=hf \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.seed="$SEED" \
    trainer.logger='[console,tensorboard,jsonl]' \
    trainer.project_name=dagrl_quickstart \
    trainer.experiment_name="smollm2-135m_grpo_arithmetic_seed$SEED" \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.total_epochs=4 \
    trainer.test_freq=5 \
    trainer.save_freq=5 \
    trainer.val_before_train=True \
    trainer.resume_mode=auto \
    trainer.max_actor_ckpt_to_keep=2 \
    trainer.default_local_dir="$CKPT_DIR" \
    "$@"
