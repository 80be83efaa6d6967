# Issue 19 on one GPU (sourced by run.sh; the verl kit received: bash benchmarks/verl_kit/build.sh recv .devkit/verl/c1):
# the learn job, then the throughput job. Each alone: job.sh issue19_learn.sh or issue19_tput.sh (one per machine
# when the two do not fit one machine's 30 minutes).
. benchmarks/device/issue19_learn.sh
. benchmarks/device/issue19_tput.sh
