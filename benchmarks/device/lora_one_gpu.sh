# LoRA on one GPU with the vLLM rollout (run.sh sources it). First SmolLM2-135M-Instruct, $STEPS (16) GRPO steps in
# each arm of $ARMS (full, lora, lora_adapter): full fine-tuning, LoRA merged into the rollout's weights, LoRA sent
# alone (adapter-only sync), greedy held-out accuracy every 4, weight-sync seconds and MB, the log-prob gap, into
# $O/lora (benchmarks/lora_learn.py prints the table). Then a Qwen3-8B-shaped model (random weights, SmolLM2's
# tokenizer) with LoRA rank 32, adapter-only sync, vLLM colocated and 256-token responses: dagrl.plan's peak, then
# $STEPS8B (4) steps whose metrics split the step into generation, log-prob, update and sync, beside the GPU's peak
# as nvidia-smi samples it every 200 ms (a line in progress); STEPS8B=0 skips the 8B part.
step lora env MODEL_PATH=$MODEL DATA_DIR=$DATA python3 benchmarks/lora_learn.py --out $O/lora --steps ${STEPS:-16} \
  --test-freq 4 --arms ${ARMS:-full,lora,lora_adapter} --script examples/grpo_trainer/run_smollm2-135m-vllm.sh
gpu_used
if [ "${STEPS8B:-4}" != 0 ]; then  # STEPS8B=0: the SmolLM2 arms alone
step init8b python3 scripts/init_random_model.py --family qwen3 --size 8b --out /tmp/q8b --tokenizer $MODEL --device cuda
LORA8B="actor_rollout_ref.model.lora.rank=32 actor_rollout_ref.model.lora.alpha=64 actor_rollout_ref.model.lora.merge=false
  actor_rollout_ref.actor.optim.lr=1e-4 actor_rollout_ref.rollout.gpu_memory_utilization=0.5
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8
  trainer.total_training_steps=${STEPS8B:-4} trainer.val_before_train=False trainer.test_freq=-1 trainer.resume_mode=disable
  data.max_response_length=256"
step plan8b env DAGRL_PLAN=1 NGPUS=1 MODEL_PATH=/tmp/q8b DATA_DIR=$DATA CKPT_DIR=$O/q8b \
  bash examples/grpo_trainer/run_smollm2-135m-vllm.sh $LORA8B
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > $O/lora8b_memory.txt &
SAMPLER=$!
step lora8b env NGPUS=1 MODEL_PATH=/tmp/q8b DATA_DIR=$DATA CKPT_DIR=$O/q8b \
  bash examples/grpo_trainer/run_smollm2-135m-vllm.sh $LORA8B
kill $SAMPLER
echo "lora8b peak $(sort -n $O/lora8b_memory.txt | tail -1) MiB in use (nvidia-smi)" >> $O/progress
fi
rm -rf $O/lora/*/ckpt/global_step_* $O/q8b/global_step_* /tmp/q8b
gpu_used
