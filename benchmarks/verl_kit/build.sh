#!/bin/bash
# verl 0.9.1 kit for the offline GPU machines: the wheels verl needs beyond the GPU image and the
# vLLM 0.26.0 kit of ../shared/devkit, pinned by sha256 in lock.txt, installed apart in /tmp/verl/site.
#   CPU machine (PyPI reachable):  bash benchmarks/verl_kit/build.sh [--chunk-mb N]
#       -> .devkit/verl/files (downloads, kept), .devkit/verl/c1..cN (one run-tool carry each), .devkit/verl/CALLS.md
#   GPU machine:  bash benchmarks/verl_kit/build.sh recv .devkit/verl/cK   (installs once all chunks are in)
#                 eval "$(bash benchmarks/verl_kit/build.sh env)"         (PYTHONPATH=/tmp/verl/site:/tmp/kit/site ...)
#                 bash benchmarks/verl_kit/build.sh status
set -eo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
V=${VERL_TMP:-/tmp/verl}
PY=${PYTHON:-python3}
MiB=1048576

case $1 in
recv)  # GPU side: collect one chunk; when all are in, check sha256, unpack and pip-install into $V/site
  mkdir -p "$V/parts"
  cp "$2"/part.* "$2"/MANIFEST "$V/parts/"
  read -r n sum < "$V/parts/MANIFEST"
  have=$(ls "$V"/parts/part.* | wc -l)
  echo "verl kit: $have/$n chunks here"
  [ "$have" -lt "$n" ] && exit 0
  [ -f "$V/ok" ] && { echo "verl kit: already installed"; exit 0; }
  got=$(cat "$V"/parts/part.* | sha256sum | cut -d' ' -f1)
  [ "$got" = "$sum" ] || { echo "verl kit: sha256 mismatch ($got != $sum); send the chunks again"; exit 1; }
  rm -rf "$V/wheels" "$V/site" && mkdir -p "$V/wheels"
  cat "$V"/parts/part.* | xz -dc | tar -x -C "$V/wheels"
  (cd "$V/wheels" && sha256sum -c --quiet SHA256SUMS) || { echo "verl kit: wheel sha256 mismatch"; exit 1; }
  SECONDS=0
  PIP_ROOT_USER_ACTION=ignore $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target "$V/site" "$V"/wheels/*.whl 2>&1 | { grep -v -e "^\[notice\]" || true; }
  [ -d "$V/site/verl" ] || { echo "verl kit: install failed"; exit 1; }
  rm -rf "$V/parts" "$V/wheels"; touch "$V/ok"
  echo "verl kit: installed into $V/site in ${SECONDS}s"
  exit 0 ;;
env)
  echo "export PYTHONPATH=$V/site:${DEVKIT_TMP:-/tmp/kit}/site\${PYTHONPATH:+:\$PYTHONPATH}"
  echo "export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 RAY_USAGE_STATS_ENABLED=0"
  echo "export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1"
  echo "export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
  exit 0 ;;
status)
  [ -f "$V/ok" ] && { echo "verl kit: installed in $V/site"; exit 0; }
  echo "verl kit: not installed ($(ls "$V"/parts/part.* 2>/dev/null | wc -l) chunks here)"; exit 1 ;;
esac

# ---- CPU side: build ----
CHUNK_MB=
while [ $# -gt 0 ]; do
  case $1 in --chunk-mb) CHUNK_MB=$2; shift ;; -h|--help) sed -n 2,9p "$0"; exit 0 ;; *) echo "build.sh: unknown $1"; exit 2 ;; esac
  shift
done
ROOT=$(git -C "$HERE" rev-parse --show-toplevel) && cd "$ROOT"
git check-ignore -q .devkit/verl || { echo "build.sh: .devkit/ is not ignored by git (run ../shared/devkit/setup.sh once)"; exit 1; }
D=.devkit/verl; F=$D/files; W=$D/work
mkdir -p "$F"
PLAT="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64
 --platform manylinux1_x86_64 --platform linux_x86_64 --platform any"

# 1. downloads, sha256-checked (lock.txt: "name==version sha256"; antlr4 4.9.3 exists only as an sdist)
req=$(mktemp); sreq=$(mktemp)
grep -v '^#' "$HERE/lock.txt" | grep -v '^antlr4' | awk 'NF==2 {print $1, "--hash=sha256:" $2}' > "$req"
grep '^antlr4' "$HERE/lock.txt" | awk '{print $1, "--hash=sha256:" $2}' > "$sreq"
# shellcheck disable=SC2086
$PY -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp $PLAT --require-hashes -r "$req" -d "$F" 2>&1 | { grep -v "is ignored: it is neither" || true; }
if ! ls "$F"/antlr4_python3_runtime-4.9.3-*.whl >/dev/null 2>&1; then
  $PY -m pip download -q --disable-pip-version-check --no-deps --no-binary=:all: --require-hashes -r "$sreq" -d "$F"
  $PY -m pip wheel -q --disable-pip-version-check --no-deps -w "$F" "$F"/antlr4-python3-runtime-4.9.3.tar.gz
fi
rm -f "$req" "$sreq"
n_lock=$(grep -vc '^#' "$HERE/lock.txt")
wheels=()
while read -r nv _; do
  nm=${nv%%==*}; ver=${nv##*==}; pat=$(echo "$nm" | tr '-' '_')
  w=$(ls "$F"/*.whl | grep -i "/${pat}-${ver}-" | head -1)
  [ -n "$w" ] || { echo "build.sh: no wheel for $nv in $F"; exit 1; }
  wheels+=("$w")
done < <(grep -v '^#' "$HERE/lock.txt")
[ ${#wheels[@]} = "$n_lock" ] || { echo "build.sh: ${#wheels[@]} wheels for $n_lock lock lines"; exit 1; }
echo "build: ${#wheels[@]} wheels, $(du -cb "${wheels[@]}" | tail -1 | awk '{printf "%.1f MB", $1/1e6}')"

# 2. repack: each wheel re-zipped uncompressed (pip installs it the same) so that xz -9 sees the raw bytes;
#    ray's Java jar and the dashboard's JS source maps are left out (no Java workers, no dashboard).
if [ ! -f "$F/verl.tar.xz" ] || [ "$HERE/lock.txt" -nt "$F/verl.tar.xz" ]; then
  rm -rf "$W" && mkdir -p "$W"
  $PY - "$W" "${wheels[@]}" <<'EOF'
import hashlib, os, sys, zipfile
out, wheels = sys.argv[1], sys.argv[2:]
skip = lambda n: n.startswith("ray/jars/") or (n.startswith("ray/dashboard/client/build/") and n.endswith(".map"))
sums = []
for w in wheels:
    dst = os.path.join(out, os.path.basename(w))
    with zipfile.ZipFile(w) as zi, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zo:
        for info in zi.infolist():
            if skip(info.filename):
                continue
            data = zi.read(info)
            info.compress_type = zipfile.ZIP_STORED
            zo.writestr(info, data)
    sums.append(f"{hashlib.sha256(open(dst, 'rb').read()).hexdigest()}  {os.path.basename(dst)}\n")
open(os.path.join(out, "SHA256SUMS"), "w").writelines(sums)
EOF
  echo "build: $(du -sb "$W" | awk '{printf "%.1f MB", $1/1e6}') unpacked; xz -9 (a few minutes on 2 cores)"
  tar -C "$W" -cf - . | xz -9 -T2 -c > "$F/verl.tar.xz.tmp"
  mv "$F/verl.tar.xz.tmp" "$F/verl.tar.xz"
  rm -rf "$W"
fi
size=$(stat -c %s "$F/verl.tar.xz")

# 3. chunk size: a call carries the checkout's travelling files + one chunk, at most 64 MiB
tree=$($PY -c 'import os, subprocess
out = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], capture_output=True, check=True).stdout
print(sum(os.lstat(p).st_size for p in out.decode().split("\0") if p and os.path.lexists(p)))')
room=$((64 * MiB - tree - 384 * 1024))
if [ -n "$CHUNK_MB" ]; then CHUNK=$($PY -c "print(int(float('$CHUNK_MB') * $MiB))"); else CHUNK=$((room < 62 * MiB ? room : 62 * MiB)); fi
CHUNK=$((CHUNK / 65536 * 65536))
[ "$CHUNK" -le "$room" ] || echo "build.sh: WARNING chunk $((CHUNK / MiB)) MiB > room $((room / MiB)) MiB beside the checkout"

# 4. cut into .devkit/verl/cK (part.NN + MANIFEST "N sha256")
rm -rf "$D"/c[0-9]*
sum=$(sha256sum "$F/verl.tar.xz" | cut -d' ' -f1)
split -b "$CHUNK" -d -a 2 "$F/verl.tar.xz" "$D/part."
N=$(ls "$D"/part.* | wc -l)
i=0
for p in "$D"/part.*; do
  i=$((i + 1)); mkdir -p "$D/c$i"; mv "$p" "$D/c$i/"; echo "$N $sum" > "$D/c$i/MANIFEST"
done
{
  echo "# verl kit ($(date -u +%F)): $N chunks of $(awk "BEGIN {printf \"%.2f\", $CHUNK / $MiB}") MiB, verl.tar.xz $(awk "BEGIN {printf \"%.1f\", $size / $MiB}") MiB"
  echo "# Send back to back on one machine, after (or between) the vLLM kit's .devkit/kit chunks:"
  for i in $(seq 1 "$N"); do
    echo "carry [\".devkit/verl/c$i\"]  command: bash benchmarks/verl_kit/build.sh recv .devkit/verl/c$i"
  done
  echo "# then: bash benchmarks/verl_kit/build.sh status && eval \"\$(bash benchmarks/verl_kit/build.sh env)\" && python3 -c 'import verl, ray, tensordict'"
} > "$D/CALLS.md"
echo "build: done"; cat "$D/CALLS.md"
