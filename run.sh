#!/usr/bin/env bash
# Install everything (scripts/setup.sh: a venv in .venv at the tested versions), then run the main
# job: the core demo on Fashion-MNIST (CPU, a few minutes).
# Extra arguments go to `autoprune demo` (see `autoprune demo --help`).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
PY=${AUTOPRUNE_VENV:-.venv}/bin/python; [ "${AUTOPRUNE_VENV:-}" = none ] && PY=${PYTHON:-python3}
exec "$PY" -m autoprune demo "$@"
