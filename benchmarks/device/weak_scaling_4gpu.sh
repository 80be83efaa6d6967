# Weak scaling on a 4-GPU machine (run.sh sources it): the weak-scaling points of docs/benchmarks.md, each against a
# dp_g1 baseline of this card, then TP2 at 2 GPUs with twice the training token budget (SP splits the activations).
for point in "dp 1" "dp 4" "tp2 4" "dp 2" "tp2 2"; do
  set -- $point
  step "ws_$1_g$2" python3 benchmarks/weak_scaling.py --out $O/ws --layouts $1 --gpus $2 --tokenizer $MODEL --timeout 900
done
step ws_tp2_g2_12k python3 benchmarks/weak_scaling.py --out $O/ws12k --layouts tp2 --gpus 2 --tokenizer $MODEL \
  --train-tokens 12288 --timeout 900
python3 benchmarks/weak_scaling.py --report --out $O/ws > $O/report.txt 2>&1
python3 benchmarks/weak_scaling.py --report --out $O/ws12k >> $O/report.txt 2>&1
# then, at half size: 2 + 2 separate pools against 4 colocated processes (benchmarks/async_pipeline.py)
step pools python3 benchmarks/async_pipeline.py --model /tmp/weak_scaling/qwen3-1.7b --data /tmp/weak_scaling/arithmetic \
  --nproc 4 --rollout-procs 2 --runs plain,pools1 --batch 64 --n 8 --steps 6 --first-step 2 --out $O/pools -- \
  actor_rollout_ref.rollout.enforce_eager=false actor_rollout_ref.rollout.ignore_eos=true \
  actor_rollout_ref.actor.megatron.param_dtype=bfloat16 actor_rollout_ref.actor.megatron.use_distributed_optimizer=true
