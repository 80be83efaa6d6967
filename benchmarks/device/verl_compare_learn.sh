# dagrl against verl, the learn job (run.sh sources it; verl installed apart): SmolLM2 GRPO, seeds 0 and 1 a side,
# all four runs at once on the one GPU (vs_verl.py --parallel: accuracy does not depend on timing; 348 s on one H200,
# against ~17.5 min one after the other), into $O/learn/seed<S>/.
step learn python3 benchmarks/vs_verl.py --smol "$MODEL" --arith "$DATA" --job learn --seeds 0,1 --parallel \
  --out $O/learn --timeout 900
gpu_used
