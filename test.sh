#!/usr/bin/env bash
# Install everything, then run the test suite (CPU only, no network).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
exec "${PYTHON:-python3}" -m pytest tests -q "$@"
