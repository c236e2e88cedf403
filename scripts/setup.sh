#!/usr/bin/env bash
# Install everything autoprune needs on a fresh Debian machine with Python 3.10+ (root or sudo),
# into a virtual environment (default: .venv in the repository), with the tested versions
# (autoprune/constraints.txt): a fresh machine, a developer machine and CI get the same stack.
#
#   PYTHON=python3.11        the interpreter the venv is made from (default: python3)
#   AUTOPRUNE_VENV=path      where the venv goes (default: .venv); "none" installs into $PYTHON itself
#   CI=true                  the venv is always made anew (CI never reuses an installed environment)
#
# Idempotent: a second run only checks (pip replaces any installed version that differs from the
# tested one), then `autoprune doctor --strict` fails if the stack still differs.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE_PY=${PYTHON:-python3}
VENV=${AUTOPRUNE_VENV:-.venv}
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

# 1. Fashion-MNIST, the built-in data set (Debian package; nothing is downloaded at run time).
if [ -z "${AUTOPRUNE_FASHION_MNIST:-}" ] && [ ! -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "setup: installing dataset-fashion-mnist (apt)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq dataset-fashion-mnist >/dev/null
fi

# 2. The virtual environment.
if [ "$VENV" = none ]; then
  PY=$BASE_PY
else
  if [ "${CI:-}" = true ] && [ -d "$VENV" ]; then
    echo "setup: CI=true, removing the existing $VENV"
    rm -rf "$VENV"
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    echo "setup: creating the virtual environment $VENV"
    "$BASE_PY" -m venv "$VENV"
  fi
  PY=$VENV/bin/python
fi

# 3. autoprune (editable) with its dependencies and the test extras, at the tested versions.
#    The constraints pin torch 2.14.1 + torchvision 0.29.1: PyPI's torchvision does not import on
#    the CPU build of torch that some machines carry (operator torchvision::nms does not exist).
echo "setup: installing autoprune and its dependencies at the tested versions (pip, a few minutes the first time)"
"$PY" -m pip install -q --disable-pip-version-check -c autoprune/constraints.txt -e ".[test]"

# 4. The installed stack must be the tested one.
"$PY" -m autoprune doctor --strict --quiet
echo "setup: done ($PY)"
