"""OBB adapter: the detection adapter (Ultralytics trains and validates, the pruned module is kept
through training) with YOLO OBB models, Ultralytics' OBB trainer and validator, the angle head's
last convs kept intact, and rotated-box mAP50-95 as the metric."""
from __future__ import annotations

from ..detection.adapter import DetectionAdapter
from . import models as obb
from .data import check_obb_label_file
from .names import NAMES


class OBBAdapter(DetectionAdapter):
    """Oriented-box detection with Ultralytics YOLO OBB models on a YOLO OBB ``data.yaml`` (labels:
    the 4 corners of each rotated box): builds patched OBBModels, trains them with Ultralytics'
    OBB trainer (the pruned module itself), validates rotated-box mAP (probabilistic IoU) with its
    OBB validator. Metrics: ``map50_95_obb`` (the pruning metric) and ``map50_obb``. ONNX: one
    output ``(batch, 4 + nc + 1, anchors)`` (rotated boxes' centre and size xywh, class scores,
    angle in radians; rotated NMS is left to the caller)."""

    task, metric, kind = "obb", "map50_95_obb", "YOLO OBB"
    ultralytics, variant = obb.TASK, NAMES    # Ultralytics' classes, the models' names
    metric_sources = (("obb", "B"),)          # rotated boxes under Ultralytics' (B) keys
    check_labels = staticmethod(check_obb_label_file)
    train_arg_numbers = frozenset({"angle"})  # its loss weights in train_args
    labels = None  # reads YOLO data only
