#!/usr/bin/env bash
# Prepare what the GPU check (scripts/gpu/check.sh) carries to a lent GPU machine, which reaches
# no network and has PyTorch, timm, onnx and onnxruntime (CPU) but not autoprune's other needs:
#   .whl/   wheels for Python 3.12 (the GPU image's python3): torch-pruning, ultralytics (+ thop),
#           segmentation-models-pytorch, timm (autoprune's pinned one; pure Python, ~4 MB
#           together). polars (55 MB) would not fit the 64 MiB carry: Ultralytics' trainer needs
#           it only to read results.csv, and check.sh puts scripts/gpu/shim/polars in its place
#   .fmnist/ the Fashion-MNIST IDX files (Debian's dataset-fashion-mnist, ~30 MB)
# Both folders are git-ignored. Then run the check with the device tool, e.g.
#   run(command="bash scripts/gpu/check.sh bench", carry=[".whl", ".fmnist"], timeout_s=340)
#   run(command="bash scripts/gpu/check.sh tests", carry=[".whl", ".fmnist"], timeout_s=300)
# (about 11 minutes with the machine's start, within a session's 15 minutes of device time)
# ONNX Runtime's CUDA / TensorRT providers (onnxruntime-gpu ~250 MB, TensorRT ~1 GB) cannot be
# carried within the limit: those parts say so and are skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl .fmnist
for spec in torch-pruning==1.6.1 ultralytics==8.4.190 ultralytics-thop==2.2.3 \
            segmentation-models-pytorch==0.6.0 timm==1.0.31; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "$spec"
done
src=${AUTOPRUNE_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
cp "$src"/*.gz .fmnist/
du -sh .whl .fmnist
