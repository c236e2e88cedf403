"""OBB adapter: the detection adapter (Ultralytics trains and validates, the pruned module is kept
through training) with YOLO OBB models, Ultralytics' OBB trainer and validator, the angle head's
last convs kept intact, and rotated-box mAP50-95 as the metric."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch.nn as nn

from ...errors import ConfigError
from ..detection.adapter import DetectionAdapter
from . import models as obb
from .data import check_obb_label_file
from .names import FAMILIES, canonical_obb_arch, resolve_arch


class OBBAdapter(DetectionAdapter):
    """Oriented-box detection with Ultralytics YOLO OBB models on a YOLO OBB ``data.yaml`` (labels:
    the 4 corners of each rotated box): builds patched OBBModels, trains them with Ultralytics'
    OBB trainer (the pruned module itself), validates rotated-box mAP (probabilistic IoU) with its
    OBB validator. Metrics: ``map50_95_obb`` (the pruning metric) and ``map50_obb``."""

    task = "obb"
    metric = "map50_95_obb"
    yolo_task = "obb"
    trainer_class = obb.KeepModuleOBBTrainer
    validator_class = obb.PatientOBBValidator
    model_class = obb.OBBModel
    check_labels = staticmethod(check_obb_label_file)
    kind, families = "YOLO OBB", FAMILIES
    canonical_arch = staticmethod(canonical_obb_arch)
    resolve_arch = staticmethod(resolve_arch)
    arch_suffix = "-obb"
    train_arg_numbers = frozenset({"angle"})  # its loss weights in train_args

    def check_model(self, model: nn.Module) -> None:
        """Refuse a model that is not a patched YOLO OBB model of the data's classes."""
        if obb.obb_head(model) is None:
            raise ConfigError(f"{type(model).__name__} has no YOLO OBB head: pass a YOLO OBB "
                              f"model (e.g. 'yolo11n-obb.yaml')")
        super().check_model(model)

    def ignored_layers(self, model: nn.Module) -> list[Any]:
        return obb.ignored_layers(model)

    def export_onnx(self, model: nn.Module, path: Path, opset_version: int = 17,
                    dynamic_batch: bool = True) -> Path:
        """``model`` as ONNX at ``path`` with Ultralytics' export head: one output ``(batch, 4 +
        nc + 1, anchors)`` (rotated boxes' centre and size xywh, class scores, angle in radians;
        rotated NMS is left to the caller); any batch size unless ``dynamic_batch`` is False."""
        return super().export_onnx(model, path, opset_version, dynamic_batch)

    @staticmethod
    def metrics_of(stats: dict[str, Any]) -> dict[str, float]:
        """autoprune's metrics from Ultralytics' OBB metrics (rotated boxes, its ``(B)`` keys)."""
        return {"map50_95_obb": float(stats["metrics/mAP50-95(B)"]),
                "map50_obb": float(stats["metrics/mAP50(B)"])}
