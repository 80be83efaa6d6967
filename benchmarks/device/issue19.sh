# Issue 19 on one GPU (sourced by run.sh; the verl kit received: bash benchmarks/verl_kit/build.sh recv .devkit/verl/c1):
# the throughput job (verl, then dagrl), then the learn job. verl's start-up alone took > 6 min on an H200.
step tput python3 benchmarks/vs_verl.py --job throughput --out $O/tput --timeout 1500
step learn python3 benchmarks/vs_verl.py --job learn --out $O/learn --timeout 900
