#!/usr/bin/env bash
# On-policy distillation on a CPU box: SmolLM2-135M-Instruct (the student) learns small-number addition from a
# teacher's per-token log-probs on its own samples, with the task reward added (dag=opd). The teacher is any model
# with SmolLM2's tokenizer; the quickstart makes one:
#   bash examples/grpo_trainer/run_smollm2-135m-cpu.sh
#   python3 scripts/model_merger.py merge --backend megatron \
#       --local_dir ~/ckpts/smollm2-135m_grpo_arithmetic_cpu/global_step_68/actor --target_dir ~/models/smollm2-grpo
# Pure distillation (no task reward, one response per prompt is enough):
#   ... distillation.distillation_loss.use_task_rewards=False actor_rollout_ref.rollout.n=1
# Extra dotted overrides given to this script are appended.
set -euo pipefail

TEACHER_PATH=${TEACHER_PATH:-$HOME/models/smollm2-grpo}
CKPT_DIR=${CKPT_DIR:-$HOME/ckpts/smollm2-135m_opd_arithmetic_cpu}

CKPT_DIR="$CKPT_DIR" bash "$(dirname "$0")/../grpo_trainer/run_smollm2-135m-cpu.sh" \
    dag=opd \
    distillation.teacher_model.model_path="$TEACHER_PATH" \
    trainer.project_name=dagrl_opd \
    trainer.experiment_name="smollm2-135m_opd_arithmetic_seed${SEED:-0}" \
    "$@"
