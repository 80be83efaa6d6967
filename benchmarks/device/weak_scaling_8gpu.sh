# Weak scaling on an 8-GPU machine (run.sh sources it), most wanted first, so that a run stopped early keeps what it
# finished: the seed script as written (5 steps, random Qwen3-8B shape), the 8-GPU weak-scaling points with this
# machine's 1-GPU baseline, then 4 + 4 separate pools against 8 colocated processes, the same model,
# prompts and batch (16 prompts x 8 per GPU), staleness 1 (benchmarks/async_pipeline.py).
step seed python3 benchmarks/weak_scaling.py --out $O/ws --seed-script --tokenizer $MODEL --timeout 1200
for point in "dp 8" "dp 1" "tp2 8"; do
  set -- $point
  step "ws_$1_g$2" python3 benchmarks/weak_scaling.py --out $O/ws --layouts $1 --gpus $2 --tokenizer $MODEL --timeout 900
done
python3 benchmarks/weak_scaling.py --report --out $O/ws > $O/report.txt 2>&1
step pools python3 benchmarks/async_pipeline.py --model /tmp/weak_scaling/qwen3-1.7b --data /tmp/weak_scaling/arithmetic \
  --nproc 8 --rollout-procs 4 --runs plain,pools1 --batch 128 --n 8 --steps 6 --first-step 2 --out $O/pools -- \
  actor_rollout_ref.rollout.enforce_eager=false actor_rollout_ref.rollout.ignore_eos=true \
  actor_rollout_ref.actor.megatron.param_dtype=bfloat16 actor_rollout_ref.actor.megatron.use_distributed_optimizer=true
