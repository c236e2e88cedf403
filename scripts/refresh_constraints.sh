#!/usr/bin/env bash
# Refresh the tested set (autoprune/constraints.txt): install the newest versions pyproject.toml's
# ranges allow into a scratch venv, run the whole suite there, and rewrite the constraints only when
# it passes. Review the diff (git diff autoprune/constraints.txt) and commit it with the suite's
# result. Takes the suite's time plus a few minutes of installing.
#
#   PYTHON=python3.11      the interpreter of the scratch venv (default: python3)
#   KEEP_VENV=1            keep the scratch venv (its path is printed)
#   extra arguments go to pytest (e.g. -x)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$(mktemp -d /tmp/autoprune-refresh.XXXXXX)
[ "${KEEP_VENV:-}" = 1 ] || trap 'rm -rf "$VENV"' EXIT
"${PYTHON:-python3}" -m venv "$VENV"
PY=$VENV/bin/python
echo "refresh: newest versions in pyproject's ranges into $VENV (no constraints)"
"$PY" -m pip install -q --disable-pip-version-check -e ".[test]"
echo "refresh: running the suite"
"$PY" -m pytest tests -q -n "${AUTOPRUNE_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
# the header comment, then the freeze sorted by name (torch before torch-pruning)
{
  sed -n '1,/^[^#]/{/^#/p}' autoprune/constraints.txt
  "$PY" -m pip freeze --exclude-editable | grep -v '^-e ' | LC_ALL=C sort -f -t= -k1,1
} > autoprune/constraints.txt.new
mv autoprune/constraints.txt.new autoprune/constraints.txt
echo "refresh: the suite passed; autoprune/constraints.txt rewritten:"
git --no-pager diff --stat -- autoprune/constraints.txt || true
