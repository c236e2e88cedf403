"""Instance-segmentation adapter: the detection adapter (Ultralytics trains and validates, the
pruned module is kept through training) with YOLO-seg models, Ultralytics' segment trainer and
validator, the prototype head kept intact, and mask mAP50-95 as the metric."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch.nn as nn

from ...errors import ConfigError
from ..detection.adapter import DetectionAdapter
from . import models as seg
from .data import check_polygons
from .names import FAMILIES, canonical_seg_arch, resolve_arch


class InstanceSegmentationAdapter(DetectionAdapter):
    """Instance segmentation with Ultralytics YOLO-seg on a YOLO-seg ``data.yaml`` (polygon
    labels): builds patched SegmentationModels, trains them with Ultralytics' segment trainer
    (the pruned module itself), validates mask and box mAP with its segment validator. Metrics:
    ``map50_95_mask`` (the pruning metric), ``map50_mask``, ``map50_95_box``, ``map50_box``."""

    task = "instance_segmentation"
    metric = "map50_95_mask"
    yolo_task = "segment"
    trainer_class = seg.KeepModuleSegmentationTrainer
    validator_class = seg.PatientSegmentationValidator
    model_class = seg.SegmentationModel
    kind, families = "YOLO-seg", FAMILIES
    canonical_arch = staticmethod(canonical_seg_arch)
    resolve_arch = staticmethod(resolve_arch)
    arch_suffix = "-seg"
    train_arg_numbers = frozenset({"overlap_mask", "mask_ratio"})  # its loss weights in train_args

    def __init__(self, data: str | os.PathLike | None = None,
                 eval_data: str | os.PathLike | None = None, **kwargs: Any):
        super().__init__(data, eval_data, **kwargs)
        for found in (self.data, self.eval_data):
            if found is not None:
                check_polygons(found)

    def check_model(self, model: nn.Module) -> None:
        """Refuse a model that is not a patched YOLO-seg model of the data's classes."""
        if seg.segment_head(model) is None:
            raise ConfigError(f"{type(model).__name__} has no YOLO Segment head: pass a YOLO-seg "
                              f"model (e.g. 'yolo11n-seg.yaml')")
        super().check_model(model)

    def ignored_layers(self, model: nn.Module) -> list[Any]:
        return seg.ignored_layers(model)

    def export_onnx(self, model: nn.Module, path: Path, opset_version: int = 17,
                    dynamic_batch: bool = True) -> Path:
        """``model`` as ONNX at ``path`` with Ultralytics' export head: ``output0`` ``(batch, 4 + nc
        + nm, anchors)`` (boxes xywh, class scores, mask coefficients; NMS is left to the caller)
        and ``output1`` ``(batch, nm, size/4, size/4)`` (the mask prototypes); any batch size
        unless ``dynamic_batch`` is False."""
        return super().export_onnx(model, path, opset_version, dynamic_batch)

    @staticmethod
    def metrics_of(stats: dict[str, Any]) -> dict[str, float]:
        """autoprune's metrics from Ultralytics' segment metrics: mask and box mAP."""
        return {"map50_95_mask": float(stats["metrics/mAP50-95(M)"]),
                "map50_mask": float(stats["metrics/mAP50(M)"]),
                "map50_95_box": float(stats["metrics/mAP50-95(B)"]),
                "map50_box": float(stats["metrics/mAP50(B)"])}
