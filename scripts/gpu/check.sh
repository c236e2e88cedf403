#!/usr/bin/env bash
# The GPU check of issue "GPU figures", run on a lent GPU machine in two commands of under 10
# minutes each (prepare with scripts/gpu/prepare.sh; see there how to call it):
#   check.sh tests   the test suite on the GPU (device="auto" picks CUDA: AMP training, the masked
#                    batched sensitivity evaluation, device selection, ...), 12 workers
#   check.sh bench   the GPU figures: sensitivity speed (PaddleSlim's algorithm against autoprune's
#                    default and the adaptive analysis), latency against FLOPs at batch 1 and 32,
#                    a pruned_latency=0.4 target timed on the GPU re-measured in a fresh process,
#                    and the main job (classification) on the GPU with its report
# Everything it prints and writes lands in $OUT (logs, report.json, figures).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 YOLO_OFFLINE=1 YOLO_AUTOINSTALL=False HF_HUB_OFFLINE=1 \
       AUTOPRUNE_FASHION_MNIST="$PWD/.fmnist" YOLO_CONFIG_DIR=/tmp/yolo-config
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, timm, onnxruntime as o; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0)); print('onnxruntime', o.__version__, o.get_available_providers())"
} 2>&1 | tee "$OUT/gpu.txt"
case "${1:-tests}" in
  tests)
    # the whole suite but the benchmark smoke tests (CPU figures) and torchrun's gloo tests
    timeout 540 python3 -m pytest tests -q -x -n 12 --dist loadfile -p no:cacheprovider \
      --ignore-glob='tests/test_benchmarks*' 2>&1 | tee "$OUT/tests.log" | tail -40
    ;;
  bench)
    timeout 200 python3 benchmarks/sensitivity_speed.py --device cuda 2>&1 | tee "$OUT/sensitivity_speed.log" | tail -25
    timeout 150 python3 benchmarks/latency_vs_flops.py --device cuda --batches 1,32 \
      --round-to none,8,32 2>&1 | tee "$OUT/latency_vs_flops.log" | tail -25
    timeout 180 python3 -m autoprune demo --device cuda --save-dir /tmp/demo-gpu --train-limit 6000 \
      2>&1 | tee "$OUT/demo.log" | tail -25
    cp /tmp/demo-gpu/report.json "$OUT/demo_report.json" 2>/dev/null
    ;;
  *) echo "usage: check.sh tests|bench"; exit 2 ;;
esac
