#!/usr/bin/env bash
# CPU machine, before a GPU run: everything a GPU run of benchmarks/device/ carries, under .devkit/ (ignored
# by git): the kit's 14 chunks (../shared/devkit/setup.sh --te), SmolLM2-135M-Instruct in bf16 cut into five
# 56 MiB parts (.devkit/m0..m4), its tokenizer (.devkit/tok), the wheels dagrl needs beyond the GPU image
# (.devkit/extra), the arithmetic parquet (.devkit/data) and a frozen copy of HEAD (.devkit/head). Prints the calls.
#   bash scripts/device_prep.sh [JOB]      JOB: a script of benchmarks/device/ (default opd_strong_teacher.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
JOB=${1:-opd_strong_teacher.sh}
PY=.venv/bin/python
[ -x $PY ] || bash scripts/setup_cpu.sh
[ -d .devkit/kit/c14 ] || bash ../shared/devkit/setup.sh --te
if [ ! -f .devkit/m4/SHA ] || [ ! -f .devkit/tok/tokenizer.json ]; then
  tmp=$(mktemp -d)
  $PY scripts/smollm2_to_hf.py --out "$tmp/smol"
  $PY - "$tmp/smol" <<'PYEOF'
import json, sys
import torch
from safetensors.torch import load_file, save_file
path = sys.argv[1]  # bf16 halves the upload (5 calls instead of 9); the GPU runs train in bf16 anyway
weights = load_file(f"{path}/model.safetensors")
save_file({k: v.to(torch.bfloat16).contiguous() for k, v in weights.items()}, f"{path}/model.safetensors",
          metadata={"format": "pt"})
config = json.load(open(f"{path}/config.json"))
config["torch_dtype"] = config["dtype"] = "bfloat16"
json.dump(config, open(f"{path}/config.json", "w"), indent=2)
PYEOF
  tar -cf "$tmp/smol.tar" -C "$tmp" smol
  split -b 56M -d -a 1 "$tmp/smol.tar" "$tmp/smol.tar."
  [ "$(ls "$tmp"/smol.tar.? | wc -l)" = 5 ] || { echo "device_prep.sh: expected 5 model parts"; exit 1; }
  for k in 0 1 2 3 4; do
    rm -rf .devkit/m$k && mkdir -p .devkit/m$k && mv "$tmp/smol.tar.$k" .devkit/m$k/
    sha256sum "$tmp/smol.tar" | cut -d' ' -f1 > .devkit/m$k/SHA
  done
  rm -rf .devkit/tok && mkdir -p .devkit/tok
  cp "$tmp"/smol/{tokenizer.json,tokenizer_config.json,config.json,generation_config.json,chat_template.jinja} .devkit/tok/
  rm -rf "$tmp"
fi
if [ ! -f .devkit/extra/hydra_core-1.3.8-py3-none-any.whl ]; then
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform any -d .devkit/extra hydra-core==1.3.8 omegaconf==2.3.1
  $PY -m pip wheel -q --no-deps -w .devkit/extra antlr4-python3-runtime==4.9.3  # sdist only: pure Python
fi
[ -f .devkit/data/train.parquet ] || $PY examples/data_preprocess/arithmetic.py --local_dir .devkit/data \
  --test_size 128 --train_size 272 --seed 0
rm -rf .devkit/head && mkdir -p .devkit/head && git archive HEAD | tar -x -C .devkit/head
git rev-parse --short HEAD > .devkit/head/.commit
[ -z "$(git status --porcelain --untracked-files=no)" ] || echo "note: .devkit/head is HEAD; uncommitted changes are not in it"
grep '^send' .devkit/CALLS.md | grep -v 'pytest' > .devkit/CALLS_JOB.md
if [[ "$JOB" == verl_compare* ]]; then  # verl and its dependencies, apart from dagrl's stack (benchmarks/verl_kit)
  [ -d .devkit/verl/c1 ] || bash benchmarks/verl_kit/build.sh
  echo "send [\".devkit/verl/c1\"]  command: bash benchmarks/verl_kit/build.sh recv .devkit/verl/c1" >> .devkit/CALLS_JOB.md
fi
for k in 0 1 2 3; do
  echo "send [\".devkit/m$k\"]  command: bash benchmarks/device/model.sh .devkit/m$k" >> .devkit/CALLS_JOB.md
done
echo "send [\".devkit/m4\", \".devkit/bin\", \".devkit/head\", \".devkit/tok\", \".devkit/extra\", \".devkit/data\"]  command:" \
  "bash benchmarks/device/model.sh .devkit/m4 && bash benchmarks/device/extras.sh && bash benchmarks/device/job.sh $JOB" \
  >> .devkit/CALLS_JOB.md
echo "then poll: sleep N; cat /tmp/out/progress  (and fetch: cd /tmp && tar czf \$OUT/out.tgz --exclude='*/global_step_*' out)"
cat .devkit/CALLS_JOB.md
