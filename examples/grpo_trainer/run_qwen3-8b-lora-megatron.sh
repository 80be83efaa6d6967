#!/usr/bin/env bash
# GRPO on Qwen3-8B with LoRA adapters on ONE GPU: the Megatron actor (TP1, frozen bf16 base, rank-32 adapters) and a
# vLLM engine colocated on the same GPU. It runs the seed script (run_qwen3-8b-megatron.sh: its data, lengths, n,
# schedule, switches and launch) with these overrides after its own:
#  - one GPU: N_GPUS_PER_NODE 8 -> 1, actor TP2 x PP4 with SP -> TP1 x PP1, rollout TP2 -> TP1;
#  - LoRA (verl's Megatron keys): actor_rollout_ref.model.lora.rank=32, alpha=64, every linear (the default
#    target_modules), merge=False: after each update only the adapter (~0.18 GB in bf16) goes to vLLM, which
#    serves it on the base it loaded once; docs/lora.md and docs/lora_sync.md;
#  - actor lr 1e-6 -> 1e-5 (adapters want a higher rate than full fine-tuning; verl's LoRA examples use ~10x);
#  - 32 prompts a step per node (256 responses) instead of 128; micro-batches of 4 for the update and the log-prob
#    pass (8 and 16): a 3k-token row's logits over Qwen3's 152k-entry vocabulary take 1.7 GiB in fp32;
#  - vLLM's gpu_memory_utilization 0.45 -> 0.5; checkpoints, TensorBoard and the experiment under qwen3-8b-lora
#    names (a full fine-tuning checkpoint is never resumed as a LoRA run).
# DAGRL_PLAN=1 prints the memory plan: on an 80 GB GPU its peak is the rollout, 58.5 GiB (the actor's bf16 base,
# 15.4, beside vLLM's 40); trained in full, the same model needs the seed script's 8 GPUs. Arguments after this
# script are overrides appended to these.
set -euo pipefail
export N_GPUS_PER_NODE=${N_GPUS_PER_NODE:-1}
NNODES=${PET_NNODES:-1}
RUN_NAME=qwen3-8b-lora_grpo_deepscaler_megatron
exec bash "$(dirname "$0")/run_qwen3-8b-megatron.sh" \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1 \
    actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=1 \
    actor_rollout_ref.actor.megatron.sequence_parallel=False \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.model.lora.rank=32 \
    actor_rollout_ref.model.lora.alpha=64 \
    actor_rollout_ref.model.lora.merge=False \
    actor_rollout_ref.actor.optim.lr=1e-5 \
    data.train_batch_size=$((32 * NNODES)) \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    trainer.experiment_name=dagrl_${RUN_NAME}_experiment \
    trainer.default_local_dir=${BASE_CKPT_PATH:-$HOME/ckpts}/${RUN_NAME}_${NNODES}nodes \
    trainer.tensorboard_dir=${BASE_TENSORBOARD_PATH:-$HOME/tensorboard}/${RUN_NAME}_tensorboard/dlc_${NNODES}_$(date +%Y%m%d_%H%M%S) \
    "$@"
