# On-policy distillation against GRPO on one GPU (sourced by run.sh; ~12 min after the kit, vLLM and megatron-core
# only): the grpo arm's step 32 is merged into the teacher, then opd and opd_pure learn from the same start, seed 0,
# into $O/opd (benchmarks/opd_learn.py prints the table).
step opd env MODEL_PATH=/tmp/smol DATA_DIR=/tmp/data/arithmetic python3 benchmarks/opd_learn.py --out $O/opd \
  --teacher-from-grpo --steps 32 --test-freq 4 --script examples/grpo_trainer/run_smollm2-135m-vllm.sh
rm -rf $O/opd/*/ckpt/global_step_*
gpu_used
