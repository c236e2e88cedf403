#!/usr/bin/env bash
# Install everything, then run the main job: the core demo on Fashion-MNIST (CPU, a few minutes).
# Extra arguments go to `autoprune demo` (see `autoprune demo --help`).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
exec "${PYTHON:-python3}" -m autoprune demo "$@"
