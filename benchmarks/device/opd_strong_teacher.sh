# On-policy distillation from a teacher stronger than the GRPO run it races (run.sh sources it; ~25 min):
# a 64-step GRPO run of seed 0 is merged into the teacher, then grpo and opd run 32 steps for seeds 0-2 into
# $O/opd, and one remax run (seed 0) exercises the greedy baseline on vLLM (benchmarks/opd_learn.py prints the tables).
step opd env MODEL_PATH=$MODEL DATA_DIR=$DATA python3 benchmarks/opd_learn.py --out $O/opd \
  --teacher-from-grpo --teacher-steps 64 --arms grpo,opd --seeds 0,1,2 --steps 32 --test-freq 4 \
  --script examples/grpo_trainer/run_smollm2-135m-vllm.sh
rm -rf $O/opd/*/ckpt/global_step_*
gpu_used
step remax env MODEL_PATH=$MODEL DATA_DIR=$DATA python3 benchmarks/opd_learn.py --out $O/remax \
  --arms remax --seeds 0 --steps 32 --test-freq 4 --script examples/grpo_trainer/run_smollm2-135m-vllm.sh
