# dagrl against verl, both jobs from one run on one GPU (run.sh sources it; verl installed apart:
# benchmarks/verl_kit/README.md). The learn job's four runs share the GPU at once (verl_compare_learn.sh; one after
# the other they take ~17.5 min of one H200), then the throughput job runs each side alone, dagrl first, so that a
# run stopped early still leaves one whole side (verl_compare_throughput.sh). One H200: learn 348 s, throughput 785 s.
# verl_compare_2gpu.sh does the same on a host of two GPUs.
. benchmarks/device/verl_compare_learn.sh
. benchmarks/device/verl_compare_throughput.sh
gpu_used
