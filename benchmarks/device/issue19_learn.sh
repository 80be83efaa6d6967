# Issue 19, the learn job (sourced by run.sh; the verl kit received): SmolLM2 GRPO, seeds 0 and 1, each seed verl then
# dagrl, into $O/learn/seed<S>/ (~21 min on one H200: verl's start-up took 362 s and its steps 4.35 s, session 21).
step learn python3 benchmarks/vs_verl.py --job learn --seeds 0,1 --out $O/learn --timeout 900
