#!/usr/bin/env bash
# Collects one part of the SmolLM2 tar (a carried .devkit/mK); with all 5 here, checks the sha256 and unpacks /tmp/smol.
set -euo pipefail
mkdir -p /tmp/smolparts && cp "$1"/smol.tar.* /tmp/smolparts/ && cp "$1"/SHA /tmp/smolparts/SHA
n=$(ls /tmp/smolparts/smol.tar.* | wc -l); echo "model parts here: $n of 5"
if [ "$n" = 5 ] && [ ! -f /tmp/smol/config.json ]; then
  cat /tmp/smolparts/smol.tar.{0,1,2,3,4} > /tmp/smol.tar
  [ "$(sha256sum /tmp/smol.tar | cut -d' ' -f1)" = "$(cat /tmp/smolparts/SHA)" ] || { echo "model sha256 mismatch"; exit 1; }
  tar -xf /tmp/smol.tar -C /tmp && rm -f /tmp/smol.tar && echo "model ready: $(ls /tmp/smol | tr '\n' ' ')"
fi
