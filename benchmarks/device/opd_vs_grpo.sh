# On-policy distillation against GRPO on one GPU (run.sh sources it; ~12 min; vLLM and megatron-core only, no
# TransformerEngine): the grpo arm's step 32 is merged into the teacher, then opd and opd_pure learn from the same
# start, seed 0, into $O/opd (benchmarks/opd_learn.py prints the table).
step opd env MODEL_PATH=$MODEL DATA_DIR=$DATA python3 benchmarks/opd_learn.py --out $O/opd \
  --teacher-from-grpo --steps 32 --test-freq 4 --script examples/grpo_trainer/run_smollm2-135m-vllm.sh
rm -rf $O/opd/*/ckpt/global_step_*
gpu_used
