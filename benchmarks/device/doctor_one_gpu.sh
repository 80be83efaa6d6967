# dagrl.doctor on one GPU with the vLLM rollout (run.sh sources it): SmolLM2-135M-Instruct, random models of each
# dense family ($FAMILIES, 4 layers of the 0.5b preset, SmolLM2's tokenizer) and MoE family ($MOE_FAMILIES,
# family:preset, 2 layers), a planted mapping error
# (tests/doctor/planted.py: layer 1's q/k rows in rotary-interleaved order; the doctor must exit 1 and name layer 1)
# and the Qwen3-1.7B shape whole, timed. Each report in $O/NAME.log; $ROLLOUT (vllm) picks the rollout.
# The random models' logits are scaled x$PEAK (30; init_random_model.py --peak): a random init's are near-uniform,
# with near-ties in greedy bf16 decoding and log-prob gaps unlike a trained model's.
PEAK=${PEAK:-30}
DOCTOR="actor_rollout_ref.rollout.name=${ROLLOUT:-vllm} data.train_files=$DATA/train.parquet
  data.val_files=$DATA/test.parquet data.train_batch_size=32 data.max_prompt_length=64 data.max_response_length=12
  actor_rollout_ref.rollout.n=8 actor_rollout_ref.actor.ppo_mini_batch_size=32
  actor_rollout_ref.actor.megatron.param_dtype=bfloat16 trainer.n_gpus_per_node=1 trainer.default_local_dir=$O/ckpt"
[ "${ROLLOUT:-vllm}" != vllm ] || DOCTOR="$DOCTOR actor_rollout_ref.rollout.gpu_memory_utilization=0.3
  actor_rollout_ref.rollout.enforce_eager=true"  # no CUDA graphs to capture: the doctor generates a few tokens
step smollm2 python3 -m dagrl.doctor actor_rollout_ref.model.path=$MODEL $DOCTOR
planted() { python3 -m torch.distributed.run --nproc-per-node 1 tests/doctor/planted.py qk_permutation "$@"; [ $? = 1 ]; }
step planted planted actor_rollout_ref.model.path=$MODEL $DOCTOR  # the doctor's finding: exit 1 is the pass
for family in ${FAMILIES-llama qwen2 qwen3 mistral}; do  # FAMILIES="" skips them
  step init_$family python3 scripts/init_random_model.py --family $family --size 0.5b --num-layers 4 \
    --out /tmp/doctor_$family --tokenizer $MODEL --device cuda --peak $PEAK
  step $family python3 -m dagrl.doctor actor_rollout_ref.model.path=/tmp/doctor_$family $DOCTOR
  rm -rf /tmp/doctor_$family
done
for entry in ${MOE_FAMILIES-qwen3_moe:30b-a3b mixtral:8x7b}; do
  family=${entry%%:*}
  step init_$family python3 scripts/init_random_model.py --family $family --size ${entry#*:} --num-layers 2 \
    --out /tmp/doctor_$family --tokenizer $MODEL --device cuda --peak $PEAK
  step $family python3 -m dagrl.doctor actor_rollout_ref.model.path=/tmp/doctor_$family $DOCTOR
  rm -rf /tmp/doctor_$family
done
step init_1.7b python3 scripts/init_random_model.py --family qwen3 --size 1.7b --out /tmp/doctor_1.7b \
  --tokenizer $MODEL --device cuda --peak $PEAK
step qwen3_1.7b python3 -m dagrl.doctor actor_rollout_ref.model.path=/tmp/doctor_1.7b $DOCTOR
rm -rf /tmp/doctor_1.7b
gpu_used
