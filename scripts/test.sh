#!/usr/bin/env bash
# README command 2 (and CI): install, then run the test suite without the slow tests.
# Extra arguments go to pytest (e.g. -m slow for the long suites, -k NAME).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_cpu.sh
.venv/bin/python -m pytest -m "not slow and not gpu" -q "$@"
