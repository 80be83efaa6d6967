# SmolLM2-135M-Instruct learning small-number addition with GRPO and the vLLM rollout on one GPU (run.sh sources it;
# ~2 min): 32 steps, greedy held-out accuracy every 4 (before the first step too), and the step time, into $O/grpo
# (metrics.jsonl; examples/grpo_trainer/run_smollm2-135m-vllm.sh is the run). The shortest check of a GPU install.
step grpo env NGPUS=1 MODEL_PATH=$MODEL DATA_DIR=$DATA CKPT_DIR=$O/grpo \
  bash examples/grpo_trainer/run_smollm2-135m-vllm.sh trainer.total_training_steps=32 trainer.resume_mode=disable
rm -rf $O/grpo/global_step_*
gpu_used
