#!/usr/bin/env bash
# Install everything autoprune needs on a fresh Debian machine with Python 3.10+ (root or sudo).
# Idempotent: a second run only checks. Set PYTHON to choose the interpreter (default: python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"

# 1. Fashion-MNIST, the built-in data set (Debian package; nothing is downloaded at run time).
if [ -z "${AUTOPRUNE_FASHION_MNIST:-}" ] && [ ! -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
  echo "setup: installing dataset-fashion-mnist (apt)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq dataset-fashion-mnist >/dev/null
fi

# 2. The known-good torch + torchvision pair first: PyPI's torchvision does not import on the CPU
#    build of torch that some machines carry (operator torchvision::nms does not exist).
if ! $PY - <<'PY' 2>/dev/null
import torch, torchvision
assert torch.__version__.split("+")[0] == "2.14.1" and torchvision.__version__.split("+")[0] == "0.29.1"
PY
then
  echo "setup: installing torch==2.14.1 torchvision==0.29.1 (pip)"
  $PY -m pip install -q --disable-pip-version-check "torch==2.14.1" "torchvision==0.29.1"
fi

# 3. autoprune itself (editable) with its dependencies and the test extras.
echo "setup: installing autoprune and its dependencies (pip)"
$PY -m pip install -q --disable-pip-version-check -e ".[test]"
echo "setup: done"
