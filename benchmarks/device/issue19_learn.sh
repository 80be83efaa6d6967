# Issue 19, the learn job (sourced by run.sh; the verl kit received): SmolLM2 GRPO, seeds 0 and 1, each seed verl then
# dagrl, into $O/learn/seed<S>/ (~15 min on one H200 with verl's fused kernels, an estimate).
step learn python3 benchmarks/vs_verl.py --job learn --seeds 0,1 --out $O/learn --timeout 900
