#!/usr/bin/env bash
# Agentic GRPO on a CPU box: SmolLM2-135M-Instruct with the calculator tool on 3-digit products (TASK=products,
# the default) or on the harder word problem a * (b + c) (TASK=marbles), or the tool-free control, small-number
# addition with a "wrong, try again" interaction (TASK=addition_retry).
# Data: python3 examples/data_preprocess/$TASK.py --local_dir ~/data/$TASK
# Tools and interactions: examples/agentic/*.yaml. Extra dotted overrides given to this script are appended.
# Written for dagrl, not derived from the siiRL seed script (examples/grpo_trainer/run_qwen3-8b-megatron.sh).
set -euo pipefail
. "$(dirname "$0")/../use_venv.sh"  # the repo's .venv when python3 lacks dagrl

HERE=$(cd "$(dirname "$0")" && pwd)
TASK=${TASK:-products}
MODEL_PATH=${MODEL_PATH:-$HOME/models/SmolLM2-135M-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/$TASK}
CKPT_DIR=${CKPT_DIR:-$HOME/ckpts/smollm2-135m_grpo_${TASK}_cpu}
SEED=${SEED:-0}

# Tool tasks: the hf engine prefills every row in flight again whenever a request joins, so tool answers join past
# the response limit (tool_overlap_steps), and the run is 4 steps, validated at 0 and 4 (docs/agentic.md: its time
# on 2 cores, and the 12-step curve with trainer.total_training_steps=12).
case "$TASK" in
    products|marbles) TASK_ARGS=(actor_rollout_ref.rollout.multi_turn.tool_config_path="$HERE/tool_config.yaml"
                                 actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3
                                 actor_rollout_ref.rollout.multi_turn.tool_overlap_steps=64
                                 data.max_prompt_length=640 data.max_response_length=64)
                      STEPS=4 TEST_FREQ=4 ;;
    addition_retry) TASK_ARGS=(actor_rollout_ref.rollout.multi_turn.interaction_config_path="$HERE/interaction_config.yaml"
                               actor_rollout_ref.rollout.multi_turn.max_user_turns=2
                               data.max_prompt_length=96 data.max_response_length=48)
                    STEPS=60 TEST_FREQ=10 ;;
    *) echo "TASK must be products, marbles or addition_retry, got $TASK" >&2; exit 2 ;;
esac

python3 -m dagrl.main_dag \
    algorithm.adv_estimator=grpo \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.train_batch_size=8 \
    data.seed="$SEED" \
    actor_rollout_ref.model.path="$MODEL_PATH" \
    actor_rollout_ref.model.trainable_top_layers=4 \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1 \
    actor_rollout_ref.actor.megatron.seed="$SEED" \
    actor_rollout_ref.actor.megatron.param_dtype=auto \
    actor_rollout_ref.actor.optim.lr=3e-5 \
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.actor.grad_clip=1.0 \
    actor_rollout_ref.rollout.name=hf \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.seed="$SEED" \
    actor_rollout_ref.rollout.multi_turn.enable=True \
    "${TASK_ARGS[@]}" \
    trainer.logger='[console,tensorboard,jsonl]' \
    trainer.project_name=dagrl_agentic \
    trainer.experiment_name="smollm2-135m_grpo_${TASK}_cpu_seed$SEED" \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.total_epochs=1 \
    trainer.total_training_steps="$STEPS" \
    trainer.test_freq="$TEST_FREQ" \
    trainer.save_freq=2 \
    trainer.val_before_train=True \
    trainer.resume_mode=auto \
    trainer.max_actor_ckpt_to_keep=2 \
    trainer.default_local_dir="$CKPT_DIR" \
    "$@"
