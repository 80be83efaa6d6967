#!/usr/bin/env bash
# GPU machine: runs a job script of benchmarks/device/ detached from a frozen copy of the commit (.devkit/head), so
# that the checkout copies of later calls do not change the code under it. Progress: /tmp/out/progress.
#   bash benchmarks/device/job.sh startup_rollout_update.sh      (then poll: cat /tmp/out/progress)
set -uo pipefail
R=$(pwd)
rm -rf /tmp/head && cp -r .devkit/head /tmp/head && mkdir -p /tmp/out
(cd /tmp/head && R=$R setsid nohup bash benchmarks/device/run.sh "$1" > /tmp/out/job.log 2>&1 < /dev/null &)
sleep 2; cat /tmp/out/progress 2>/dev/null || echo "job started; its first step not begun yet"
