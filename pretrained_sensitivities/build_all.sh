#!/usr/bin/env bash
# Rebuild every DEFAULT sensitivity profile listed in issue 6 (public data only; a GPU is used
# when there is one). Profiles already listed in the output folder's index.json are skipped
# unless --force is given. Extra arguments after the options go to every build (e.g. --seed 1).
#
#   pretrained_sensitivities/build_all.sh [--out DIR] [--force]
#       [--only classification|detection|segmentation|instance_segmentation|pose|obb|rtdetr]
#
# rtdetr-l takes hours on a CPU (30 epochs at 128 px, 5.3-5.5 min each on one AVX-512 core, then
# 73 groups x 9 ratios on 64 val scenes, 8.7 s a point: about 4 h 20 min, bundled 2026-11-27);
# build it on a GPU (scripts/gpu/check.sh profiles rtdetr-l), or over several CPU sittings with
# --work-dir DIR (passed to every build: a killed build resumes from its last epoch / point when
# run again). yolov9c took 68 min on one AVX-512 core.
#
# Default output: this folder (pretrained_sensitivities/, what the wheel ships).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$here"
skip="--skip-existing"
only=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --force) skip=""; shift ;;
    --only) only="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) extra+=("$1"); shift ;;
  esac
done
python=${PYTHON:-python}

classification=(resnet18 resnet34 resnet50 mobilenet_v2 mobilenetv3_large_100
                mobilenetv3_small_100 efficientnet_b0 yolo11n-cls)
detection=(yolov8n yolov8s yolo11n yolo11s yolo26n yolov9c)
rtdetr=(rtdetr-l)
instance_segmentation=(yolov8n-seg yolo11n-seg yolo26n-seg)
pose=(yolov8n-pose yolo11n-pose yolo26n-pose)
obb=(yolov8n-obb yolo11n-obb yolo26n-obb)
segmentation=()
for arch in unet fpn deeplabv3plus; do
  for encoder in resnet18 mobilenet_v2; do segmentation+=("smp/$arch/$encoder"); done
done

failed=()
for task in classification detection segmentation instance_segmentation pose obb rtdetr; do
  [ -n "$only" ] && [ "$only" != "$task" ] && continue
  declare -n archs="$task"
  for arch in "${archs[@]}"; do
    echo "== $task $arch"
    if ! "$python" -m autoprune profiles build --arch "$arch" --task "$task" --out "$out" \
        --device auto $skip "${extra[@]}"; then
      failed+=("$task/$arch")
    fi
  done
done
"$python" -m autoprune profiles list --out "$out"
if [ ${#failed[@]} -gt 0 ]; then
  echo "failed: ${failed[*]}" >&2
  exit 1
fi
