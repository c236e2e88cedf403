#!/usr/bin/env bash
# Prepare what the GPU check (scripts/gpu/check.sh) carries to a lent GPU machine, which reaches
# no network and has PyTorch, timm, onnx and onnxruntime (CPU) but not autoprune's other needs:
#   .whl/   wheels for Python 3.12 (the GPU image's python3): torch-pruning, ultralytics (+ thop),
#           segmentation-models-pytorch (pure Python, ~2 MB together; polars, which Ultralytics
#           imports only for plots, is left out: 54 MB would not fit the 64 MiB carry)
#   .fmnist/ the Fashion-MNIST IDX files (Debian's dataset-fashion-mnist, ~30 MB)
# Both folders are git-ignored. Then run the check with the device tool, e.g.
#   run(command="bash scripts/gpu/check.sh tests", carry=[".whl", ".fmnist"], timeout_s=560)
#   run(command="bash scripts/gpu/check.sh bench", carry=[".whl", ".fmnist"], timeout_s=560)
# ONNX Runtime's CUDA / TensorRT providers (onnxruntime-gpu ~250 MB, TensorRT ~1 GB) cannot be
# carried within the limit: those parts say so and are skipped.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl .fmnist
for spec in torch-pruning==1.6.1 ultralytics==8.4.190 ultralytics-thop==2.2.3 \
            segmentation-models-pytorch==0.6.0; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "$spec"
done
src=${AUTOPRUNE_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
cp "$src"/*.gz .fmnist/
du -sh .whl .fmnist
