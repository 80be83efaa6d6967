#!/usr/bin/env bash
# GPU machine: dagrl's own dependencies that the image lacks (hydra-core, omegaconf, antlr4) into the kit's site,
# and the arithmetic parquet into /tmp/data/arithmetic. Carried: .devkit/extra, .devkit/data.
set -euo pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/kit/site .devkit/extra/*.whl 2>&1 | tail -2
mkdir -p /tmp/data/arithmetic && cp .devkit/data/*.parquet /tmp/data/arithmetic/
echo "extras installed; data: $(ls /tmp/data/arithmetic | tr '\n' ' ')"
