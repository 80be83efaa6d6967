# Issue 19's next device session (sourced by run.sh; the verl kit received): the two-seed learn job (~6 min on one
# H200), then vllm_drive.py's modes for what is left of the 30 minutes.
. benchmarks/device/issue19_learn.sh
. benchmarks/device/issue19_drive.sh
