#!/usr/bin/env bash
# README command 2 (and CI): install, lint with ruff, then run the test suite without the slow tests.
# Extra arguments go to pytest (e.g. -m slow for the long suites, -k NAME).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_cpu.sh
# ruff.toml's rules over the whole checkout: a violation fails the command before the tests start
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest -m "not slow and not gpu" -q "$@"
