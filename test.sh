#!/usr/bin/env bash
# Install everything (scripts/setup.sh: a venv in .venv at the tested versions), then run the test
# suite (CPU only, no network). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
PY=${AUTOPRUNE_VENV:-.venv}/bin/python; [ "${AUTOPRUNE_VENV:-}" = none ] && PY=${PYTHON:-python3}
exec "$PY" -m pytest tests -q "$@"
