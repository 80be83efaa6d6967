# Issue 19, both jobs from one run on one GPU (sourced by run.sh; the verl kit received), when no host of two GPUs is
# lent (issue19_both.sh): one after the other the two jobs take ~36 minutes of one H200, more than a session's 30.
# The learn job's accuracy does not depend on timing, so its four runs (two seeds a side) share the GPU at once
# (vs_verl.py --parallel: a fixed KV cache for each vLLM, a Ray cluster per verl, a port per torchrun); the throughput
# job then runs each side alone, dagrl first, so that a run cut by the device budget still leaves one whole side.
step learn python3 benchmarks/vs_verl.py --job learn --seeds 0,1 --parallel --out $O/learn --timeout 900
gpu_used
step tput python3 benchmarks/vs_verl.py --job throughput --out $O/tput --sides dagrl,verl --timeout 1200
gpu_used
