# dagrl against verl (run.sh sources it; verl installed apart): the two-seed learn job (~6 min on one H200), then
# vllm_drive.py's modes (~2 min each).
. benchmarks/device/verl_compare_learn.sh
. benchmarks/device/verl_compare_vllm_drive.sh
