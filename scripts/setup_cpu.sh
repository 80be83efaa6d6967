#!/usr/bin/env bash
# Creates .venv with dagrl on a CPU box. torch is pinned in the same pip call (2.13.0, a CPU build), so pip
# never resolves a multi-GB CUDA torch for megatron-core's torch requirement.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0" -e ".[test,quickstart]"
echo "dagrl installed in $(pwd)/.venv"
