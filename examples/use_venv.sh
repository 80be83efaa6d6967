# Sourced by the examples/*/run_*.sh scripts. The set-up commands install dagrl into the repo's .venv, which a fresh
# shell's python3 does not see: use it then (-I: a python3 started in the repo root would otherwise find the dagrl
# sources without their dependencies). A python3 that has dagrl (a GPU image) is left alone.
if ! python3 -I -c 'import dagrl' 2>/dev/null && [ -f "$(dirname "${BASH_SOURCE[0]}")/../.venv/bin/activate" ]; then
    . "$(dirname "${BASH_SOURCE[0]}")/../.venv/bin/activate"
fi
