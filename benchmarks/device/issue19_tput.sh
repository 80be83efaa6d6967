# Issue 19, the throughput job (sourced by run.sh; the verl kit received): dagrl first, so that a run cut by the device
# budget still leaves one whole side (verl's start-up took ~5 min on an H200, its steps 155 s without fused kernels).
step tput python3 benchmarks/vs_verl.py --job throughput --out $O/tput --sides dagrl,verl --timeout 1200
