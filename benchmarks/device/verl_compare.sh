# Issue 19, both jobs from one run on one GPU (sourced by run.sh; the verl kit received: bash benchmarks/verl_kit/
# build.sh recv .devkit/verl/c1). One after the other they took ~36 minutes of one H200, more than a session's 30: the
# learn job's four runs now share the GPU at once (issue19_learn.sh), then the throughput job runs each side alone,
# dagrl first, so that a run cut by the device budget still leaves one whole side (issue19_tput.sh). Session 23, one
# H200: learn 348 s, throughput 785 s. issue19_both.sh does the same on a host of two GPUs.
. benchmarks/device/issue19_learn.sh
. benchmarks/device/issue19_tput.sh
gpu_used
