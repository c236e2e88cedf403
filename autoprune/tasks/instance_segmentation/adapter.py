"""Instance-segmentation adapter: the detection adapter (Ultralytics trains and validates, the
pruned module is kept through training) with YOLO-seg models, Ultralytics' segment trainer and
validator, the prototype head kept intact, and mask mAP50-95 as the metric."""
from __future__ import annotations

import os
from typing import Any

from ..detection.adapter import DetectionAdapter
from . import models as seg
from .data import check_polygons
from .labels import POLYGONS
from .names import NAMES


class InstanceSegmentationAdapter(DetectionAdapter):
    """Instance segmentation with Ultralytics YOLO-seg on a YOLO-seg ``data.yaml`` (polygon
    labels; COCO polygons or RLE masks converted to them): builds patched SegmentationModels,
    trains them with Ultralytics' segment trainer (the pruned module itself), validates mask and
    box mAP with its segment validator. Metrics: ``map50_95_mask`` (the pruning metric),
    ``map50_mask``, ``map50_95_box``, ``map50_box``. ONNX: ``output0`` ``(batch, 4 + nc + nm,
    anchors)`` (boxes, class scores, mask coefficients) and ``output1`` ``(batch, nm, size/4,
    size/4)`` (the mask prototypes)."""

    task, metric, kind = "instance_segmentation", "map50_95_mask", "YOLO-seg"
    ultralytics, variant = seg.TASK, NAMES    # Ultralytics' classes, the models' names
    metric_sources = (("mask", "M"), ("box", "B"))  # map50_95_mask <- mAP50-95(M)...
    labels = POLYGONS  # COCO objects converted to polygon lines
    train_arg_numbers = frozenset({"overlap_mask", "mask_ratio"})  # its loss weights in train_args

    def __init__(self, data: str | os.PathLike | None = None,
                 eval_data: str | os.PathLike | None = None, **kwargs: Any):
        super().__init__(data, eval_data, **kwargs)
        for found in (self.data, self.eval_data):
            if found is not None:
                check_polygons(found)
