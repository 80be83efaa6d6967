#!/usr/bin/env bash
# Sourced environment and step helper for the job scripts (started by job.sh inside /tmp/head, $R the checkout).
set -uo pipefail
O=/tmp/out
eval "$(bash "$R"/.devkit/bin/gpu.sh env)"
export PYTHONPATH=/tmp/head:$PYTHONPATH
# step NAME CMD...: CMD's output into $O/NAME.log, start/end lines with exit code and seconds into $O/progress
step() { local name=$1; shift; local t0; t0=$(date +%s); echo "$(date +%T) start $name" >> $O/progress
  "$@" > "$O/$name.log" 2>&1; local rc=$?; echo "$(date +%T) done $name rc=$rc $(( $(date +%s) - t0 )) s" >> $O/progress; }
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader | tr '\n' ' ' >> $O/progress; echo >> $O/progress; }
(nvidia-smi; python3 -c 'import torch, vllm, megatron.core, transformer_engine as te
print(torch.__version__, vllm.__version__, megatron.core.__version__, te.__version__)'; cat .commit) > $O/env.txt 2>&1
. "benchmarks/device/$1"
echo "$(date +%T) ALL DONE" >> $O/progress
