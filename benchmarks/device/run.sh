#!/usr/bin/env bash
# Runs a job of benchmarks/device/ on a GPU machine whose python3 has dagrl's GPU install (torch with CUDA, vLLM,
# megatron-core, TransformerEngine: docs/install.md) and dagrl's own dependencies; this script activates nothing.
#   bash benchmarks/device/run.sh JOB [--model DIR] [--data DIR] [--out DIR] [--code DIR] [--detach]
# JOB: a job's name (startup_rollout_update) or a job file. --model: SmolLM2-135M-Instruct in HF layout (default
# ~/models/SmolLM2-135M-Instruct; scripts/smollm2_to_hf.py makes it); --data: the arithmetic parquet folder (default
# ~/data/arithmetic; examples/data_preprocess/arithmetic.py); --out: where each step's log, env.txt and progress go
# (default outputs/device/JOB); --code: run that copy of the source (e.g. a commit unpacked by tools/airgap)
# instead of this checkout. --detach: start it in the background and return; the job then runs from a copy of the
# source in OUT/code, so that files changing in the checkout meanwhile do not change the code under it.
# Progress: OUT/progress, one line as each step starts and ends (exit code, seconds), "ALL DONE" at the end.
set -uo pipefail
usage() { sed -n 2,12p "$0" | sed 's/^# \{0,1\}//'; exit 2; }
fail() { echo "run.sh: $*" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
JOB= MODEL=$HOME/models/SmolLM2-135M-Instruct DATA=$HOME/data/arithmetic OUT= CODE=$(cd "$HERE/../.." && pwd) DETACH=0
while [ $# -gt 0 ]; do
  case $1 in
    --model|--data|--out|--code) [ $# -ge 2 ] || fail "$1 needs a folder"
      declare "$(echo "${1#--}" | tr a-z A-Z)=$2"; shift ;;
    --detach) DETACH=1 ;;
    -h|--help) usage ;;
    -*) fail "unknown option $1 (see --help)" ;;
    *) [ -z "$JOB" ] || fail "one job at a time ($JOB, then $1)"; JOB=$1 ;;
  esac
  shift
done
[ -n "$JOB" ] || usage
if [ -f "$JOB" ]; then JOB=$(cd "$(dirname "$JOB")" && pwd)/$(basename "$JOB")
elif [ -f "$HERE/${JOB%.sh}.sh" ] && [ "${JOB%.sh}" != run ]; then JOB=$HERE/${JOB%.sh}.sh
else fail "no job $JOB: one of $(cd "$HERE" && ls *.sh | grep -v '^run.sh$' | sed 's/\.sh$//' | tr '\n' ' ')"; fi
NAME=$(basename "$JOB" .sh)
OUT=${OUT:-outputs/device/$NAME}
[ -f "$MODEL/config.json" ] || fail "--model $MODEL has no config.json" \
  "(python3 scripts/smollm2_to_hf.py --out DIR makes SmolLM2-135M-Instruct)"
[ -f "$DATA/train.parquet" ] || fail "--data $DATA has no train.parquet" \
  "(python3 examples/data_preprocess/arithmetic.py --local_dir DIR --test_size 128 --train_size 272 --seed 0)"
[ -f "$CODE/dagrl/main_dag.py" ] || fail "--code $CODE holds no dagrl source (dagrl/main_dag.py)"
mkdir -p "$OUT" || fail "cannot make --out $OUT"
MODEL=$(cd "$MODEL" && pwd) DATA=$(cd "$DATA" && pwd) OUT=$(cd "$OUT" && pwd) CODE=$(cd "$CODE" && pwd)

if [ "$DETACH" = 1 ]; then  # a frozen copy of the source, then this script again from it, detached (setsid)
  rm -rf "$OUT/code" && mkdir -p "$OUT/code"
  if git -C "$CODE" rev-parse --is-inside-work-tree > /dev/null 2>&1; then  # tracked and unignored files only
    # tracked files deleted from the work tree are listed too: left out here, so tar has no "Cannot stat" to say
    (cd "$CODE" && git ls-files -z -co --exclude-standard | grep -zv "^${OUT#"$CODE"/}/" \
      | while IFS= read -r -d '' f; do if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi; done \
      | tar --null --ignore-failed-read -T - -cf -) | tar -x -C "$OUT/code"  # not OUT itself, if inside
    dirty=$(git -C "$CODE" diff --quiet HEAD || echo " with uncommitted changes")
    echo "$(git -C "$CODE" rev-parse --short HEAD)$dirty" > "$OUT/code/.commit"
  else  # no git: all but the usual heavy ignored folders and the output folder itself
    (cd "$CODE" && tar -cf - --exclude=./.venv --exclude=./.airgap --exclude=./outputs \
      --exclude="./${OUT#"$CODE"/}" .) | tar -x -C "$OUT/code"
  fi
  # the job from the frozen copy; a job file the copy lacks (an ignored or untracked one) is read where it is
  case $JOB in "$CODE"/*) [ ! -f "$OUT/code/${JOB#"$CODE"/}" ] || JOB=$OUT/code/${JOB#"$CODE"/} ;; esac
  setsid nohup bash "$OUT/code/benchmarks/device/run.sh" "$JOB" --model "$MODEL" --data "$DATA" --out "$OUT" \
    --code "$OUT/code" > "$OUT/job.log" 2>&1 < /dev/null &
  echo $! > "$OUT/pid"
  echo "run.sh: $NAME started in the background (pid $!); progress: $OUT/progress, log: $OUT/job.log"
  exit 0
fi

# The job's view: O (its output folder), MODEL, DATA, and the helpers step and gpu_used, run in CODE.
O=$OUT
export MODEL DATA O PYTHONPATH=$CODE${PYTHONPATH:+:$PYTHONPATH}
cd "$CODE" || exit 2
rm -f "$O/failed"; : > "$O/progress"
# step NAME CMD...: CMD's output into $O/NAME.log; its start, end, exit code and seconds into $O/progress
step() {
  local name=$1 t0 rc; shift; t0=$(date +%s); echo "$(date +%T) start $name" >> "$O/progress"
  "$@" > "$O/$name.log" 2>&1; rc=$?
  echo "$(date +%T) done $name rc=$rc $(( $(date +%s) - t0 )) s" >> "$O/progress"
  [ $rc = 0 ] || echo "$name" >> "$O/failed"
}
# gpu_used: each GPU's memory in use, one line into $O/progress
gpu_used() {
  { nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"; } \
    | tr '\n' ' ' >> "$O/progress"; echo >> "$O/progress"
}
{ nvidia-smi; python3 -c 'import torch, vllm, megatron.core, transformer_engine as te
print(torch.__version__, vllm.__version__, megatron.core.__version__, te.__version__)'
  echo "code: $CODE $(cat .commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null)"; } > "$O/env.txt" 2>&1
echo "$(date +%T) job $NAME (model $MODEL, data $DATA)" >> "$O/progress"
. "$JOB"
wait  # steps a job started in the background
failed=$(sort -u "$O/failed" 2>/dev/null | paste -sd ' ')
echo "$(date +%T) ALL DONE${failed:+ (failed: $failed)}" >> "$O/progress"
[ -z "$failed" ]
