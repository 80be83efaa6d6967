#!/usr/bin/env bash
# Creates .venv with dagrl on a CPU box. torch 2.13.0 comes first from PyTorch's CPU index (falling back to the
# configured one) and stays pinned in the dagrl install, so pip never resolves a multi-GB CUDA torch for
# megatron-core's torch requirement.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c 'import sys, torch; sys.exit(torch.__version__ != "2.13.0+cpu" and torch.__version__ != "2.13.0")' \
    2>/dev/null; then
  # a stock index resolves torch==2.13.0 to the multi-GB CUDA build: ask PyTorch's CPU wheel index first, then fall
  # back to the configured index (a machine whose own index offers the CPU build, or no route to download.pytorch.org)
  .venv/bin/python -m pip install -q --retries 0 --timeout 15 --index-url https://download.pytorch.org/whl/cpu \
    "torch==2.13.0" 2>/dev/null || .venv/bin/python -m pip install -q "torch==2.13.0"
fi
.venv/bin/python -m pip install -q "torch==2.13.0" -e ".[test,quickstart]"
echo "dagrl installed in $(pwd)/.venv"
