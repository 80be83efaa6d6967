#!/usr/bin/env bash
# Agentic GRPO on GPUs: SmolLM2-135M-Instruct learns to call a calculator for 3-digit x 3-digit products (a task it
# cannot do in its head), over up to 3 assistant turns (call -> result -> answer). vLLM rollout colocated with the
# Megatron actor. Data: python3 examples/data_preprocess/products.py --local_dir ~/data/products
# TASK=marbles (or run_smollm2-135m-marbles-vllm.sh) trains the harder word problem of marbles.py instead.
# Tools: examples/agentic/tool_config.yaml. Extra dotted overrides given to this script are appended.
# Written for dagrl, not derived from the siiRL seed script (examples/grpo_trainer/run_qwen3-8b-megatron.sh).
set -euo pipefail
. "$(dirname "$0")/../use_venv.sh"  # the repo's .venv when python3 lacks dagrl

HERE=$(cd "$(dirname "$0")" && pwd)
TASK=${TASK:-products}
MODEL_PATH=${MODEL_PATH:-$HOME/models/SmolLM2-135M-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/$TASK}
CKPT_DIR=${CKPT_DIR:-$HOME/ckpts/smollm2-135m_grpo_${TASK}_vllm}
NGPUS=${NGPUS:-1}
SEED=${SEED:-0}

TRAINING_CMD=(-m dagrl.main_dag
    algorithm.adv_estimator=grpo
    data.train_files="$DATA_DIR/train.parquet"
    data.val_files="$DATA_DIR/test.parquet"
    data.train_batch_size=32
    data.max_prompt_length=640
    data.max_response_length=128
    data.seed="$SEED"
    actor_rollout_ref.model.path="$MODEL_PATH"
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1
    actor_rollout_ref.actor.megatron.seed="$SEED"
    actor_rollout_ref.actor.megatron.param_dtype=bfloat16
    actor_rollout_ref.actor.optim.lr=1e-5
    actor_rollout_ref.actor.ppo_mini_batch_size=32
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32
    actor_rollout_ref.actor.grad_clip=1.0
    actor_rollout_ref.rollout.name=vllm
    actor_rollout_ref.rollout.tensor_model_parallel_size=1
    actor_rollout_ref.rollout.gpu_memory_utilization=0.3
    actor_rollout_ref.rollout.n=8
    actor_rollout_ref.rollout.temperature=1.0
    actor_rollout_ref.rollout.seed="$SEED"
    actor_rollout_ref.rollout.multi_turn.enable=True
    actor_rollout_ref.rollout.multi_turn.tool_config_path="$HERE/tool_config.yaml"
    actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3
    trainer.logger='[console,jsonl]'
    trainer.project_name=dagrl_agentic
    trainer.experiment_name="smollm2-135m_grpo_${TASK}_vllm_seed$SEED"
    trainer.n_gpus_per_node="$NGPUS"
    trainer.nnodes=1
    trainer.total_epochs=1
    trainer.total_training_steps=40
    trainer.test_freq=10
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
