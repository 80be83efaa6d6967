#!/bin/bash
# verl 0.9.1 and the wheels it needs beyond dagrl's GPU install (docs/install.md: torch 2.11, vLLM 0.26.0, ...),
# pinned by sha256 in lock.txt, installed apart from dagrl's packages in $VERL_HOME/site (default /tmp/verl/site),
# carried to a GPU machine without network by tools/airgap.
#   machine with network:  bash benchmarks/verl_kit/build.sh [--out DIR] [--part-mb N] [--python-version V]
#       -> DIR/part01, part02, ... (default DIR .airgap/verl; downloads kept in DIR/files)
#   GPU machine:  bash benchmarks/verl_kit/build.sh unpack PART_DIR ...   (installs once all parts are in)
#                 bash benchmarks/verl_kit/build.sh status
#                 eval "$(bash benchmarks/verl_kit/build.sh env)"        (verl's site first on PYTHONPATH)
set -eo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
AIRGAP=$HERE/../../tools/airgap/airgap.py
V=${VERL_HOME:-/tmp/verl}
PY=${PYTHON:-python3}

case $1 in
unpack)  # GPU side: take part folders; with all of them here, check, unpack and pip-install into $V/site
  shift; exec $PY "$AIRGAP" unpack "$@" --dest "$V" --site "$V/site" ;;
status)
  exec $PY "$AIRGAP" status --dest "$V" ;;
env)  # verl's site first, so that its transformers and tokenizers shadow the install's in verl's processes only
  echo "export PYTHONPATH=$V/site\${PYTHONPATH:+:\$PYTHONPATH}"
  echo "export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 RAY_USAGE_STATS_ENABLED=0"
  echo "export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1"
  echo "export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1"
  exit 0 ;;
esac

# ---- the machine with network: download, repack, cut ----
ROOT=$(git -C "$HERE" rev-parse --show-toplevel)
OUT=$ROOT/.airgap/verl PART_MB=60 PYV=3.12
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift ;;
    --part-mb) PART_MB=$2; shift ;;
    --python-version) PYV=$2; shift ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) echo "build.sh: unknown $1 (see --help)"; exit 2 ;;
  esac
  shift
done
PLAT=()
for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1 linux; do
  PLAT+=(--platform "${p}_x86_64")
done

# 1. the lock's wheels for the GPU machine's Python (antlr4 4.9.3 exists only as an sdist: built here, pure Python)
$PY "$AIRGAP" wheels --lock "$HERE/lock.txt" --dest "$OUT/files" --python-version "$PYV" "${PLAT[@]}" --platform any

# 2. repack: each wheel re-zipped uncompressed (pip installs it the same) so that xz -9 sees the raw bytes (the
#    121 MB of wheels pack to 44.5 MiB); ray's Java jar and the dashboard's JS source maps are left out (no Java
#    workers, no dashboard).
W=$OUT/work
if [ ! -f "$W/.done" ] || [ "$HERE/lock.txt" -nt "$W/.done" ]; then
  rm -rf "$W" && mkdir -p "$W"
  $PY - "$W" "$HERE/lock.txt" "$OUT/files" <<'EOF'
import os, sys, zipfile
sys.path.insert(0, os.path.join(os.path.dirname(sys.argv[2]), "..", "..", "tools", "airgap"))
from wheels import find_wheel, read_lock
out, lock, files = sys.argv[1:]
skip = lambda n: n.startswith("ray/jars/") or (n.startswith("ray/dashboard/client/build/") and n.endswith(".map"))
for name, version, _ in read_lock(lock):
    wheel = find_wheel(files, name, version)
    with zipfile.ZipFile(wheel) as zi, zipfile.ZipFile(os.path.join(out, os.path.basename(wheel)), "w") as zo:
        for info in zi.infolist():
            if not skip(info.filename):
                data = zi.read(info)
                info.compress_type = zipfile.ZIP_STORED
                zo.writestr(info, data)
EOF
  touch "$W/.done"
fi
size=$(du -sb "$W" | awk '{printf "%.1f MB", $1/1e6}')
echo "build: $(ls "$W"/*.whl | wc -l) wheels, $size repacked; xz -9 (a few minutes on 2 cores)"

# 3. one xz tar of them, cut into parts of PART_MB (OUT/partNN, each with its MANIFEST.json)
$PY "$AIRGAP" pack --name verl --out "$OUT" --part-mb "$PART_MB" --xz --wheels "$W"
