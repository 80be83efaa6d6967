# Issue 19 on one GPU (sourced by run.sh; the verl kit received: bash benchmarks/verl_kit/build.sh recv .devkit/verl/c1):
# the throughput job (dagrl first: verl's start-up alone took > 6 min on an H200, so a run cut by the device budget
# still leaves one whole side), then the learn job.
step tput python3 benchmarks/vs_verl.py --job throughput --out $O/tput --sides dagrl,verl --timeout 1200
step learn python3 benchmarks/vs_verl.py --job learn --seeds 0,1 --out $O/learn --timeout 900
