#!/usr/bin/env bash
# Install everything (scripts/setup.sh: a venv in .venv at the tested versions), then run the test
# suite (CPU only, no network). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
PY=${AUTOPRUNE_VENV:-.venv}/bin/python; [ "${AUTOPRUNE_VENV:-}" = none ] && PY=${PYTHON:-python3}
# Two workers (pytest-xdist; each test's torch uses one thread), a test file per worker at a time
# so a file's module fixtures are built once: ~2x faster on the 2-core CI machine. The files go
# out slowest first (tests/conftest.py, tests/file_seconds.json), not by test count.
exec "$PY" -m pytest tests -q -n "${AUTOPRUNE_TEST_WORKERS:-2}" --dist loadfile \
  --no-loadscope-reorder "$@"
