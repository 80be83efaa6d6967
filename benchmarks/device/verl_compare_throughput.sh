# dagrl against verl, the throughput job (run.sh sources it; verl installed apart): dagrl first, so that a run stopped
# early still leaves one whole side (18 min on one H200: dagrl 324 s, verl 669 s with its fused kernels).
step tput python3 benchmarks/vs_verl.py --smol "$MODEL" --arith "$DATA" --job throughput --out $O/tput \
  --sides dagrl,verl --timeout 1200
