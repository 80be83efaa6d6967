#!/usr/bin/env bash
# Agentic GRPO on GPUs, the harder tool task: SmolLM2-135M-Instruct with the calculator on "A box holds a marbles.
# How many marbles are in b boxes and c more boxes?" (a * (b + c), 3-digit numbers): the model must write the
# expression, parentheses included, before the tool helps (step 0, greedy: ~0.4 accurate; docs/agentic.md).
# The products run (run_smollm2-135m-products-vllm.sh) with TASK=marbles, 60 steps, held-out greedy validation
# every 10. Data: python3 examples/data_preprocess/marbles.py --local_dir ~/data/marbles
# Extra dotted overrides given to this script are appended.
# Written for dagrl, not derived from the siiRL seed script (examples/grpo_trainer/run_qwen3-8b-megatron.sh).
set -euo pipefail
TASK=marbles exec bash "$(dirname "$0")/run_smollm2-135m-products-vllm.sh" trainer.total_training_steps=60 "$@"
