"""RT-DETR adapter: the detection adapter (Ultralytics trains and validates, the pruned module is
kept through training, mAP50-95 is the metric, YOLO / COCO / VOC data) with Ultralytics'
RT-DETR models, trainer and validator; the CNN backbone and the hybrid encoder's convolutions
prune, the transformer layers keep their widths (:mod:`.models`)."""
from __future__ import annotations

from typing import Any

import torch.nn as nn

from ...errors import ConfigError
from ..detection.adapter import DetectionAdapter
from ..detection.deployed import deploy_module
from . import models as rtdetr
from .names import NAMES

# the least input size of rtdetr-l / rtdetr-x (300 queries among the anchors of 3 levels)
LEAST_INPUT_SIZE = 128


class RTDETRAdapter(DetectionAdapter):
    """Real-time DETR (Ultralytics' ``rtdetr-l`` / ``rtdetr-x``) on a YOLO ``data.yaml`` (COCO /
    VOC converted as for detection): builds RTDETRDetectionModels, trains them with Ultralytics'
    RT-DETR trainer (the pruned module itself), validates box mAP50-95 with its RT-DETR
    validator. ONNX: one output ``(batch, 300, 4 + nc)`` (the decoder's queries: boxes xywh
    normalised to the input, class scores; no NMS needed)."""

    task, metric, kind = "rtdetr", "map50_95", "RT-DETR"
    ultralytics, variant = rtdetr.TASK, NAMES  # Ultralytics' classes, the models' names
    metric_sources = (("", "B"),)              # map50_95 <- mAP50-95(B), as detection
    model_hint = "an RT-DETR model (e.g. 'rtdetr-l.yaml')"
    least_input_size = LEAST_INPUT_SIZE

    @classmethod
    def check_settings(cls, settings: Any, flow: Any) -> None:
        """Detection's checks, and an input size the decoder's query selection takes, before
        any data is read."""
        super().check_settings(settings, flow)
        size = getattr(settings, "input_size", None)
        if size is not None and size < LEAST_INPUT_SIZE:
            raise ConfigError(_too_small(size, LEAST_INPUT_SIZE))

    def new_model(self, yaml_name: str, num_classes: int, **_: Any) -> nn.Module:
        """Ultralytics' RTDETRDetectionModel of ``yaml_name``, its class count where the YOLO
        base reads it (:func:`.models.expose_classes`)."""
        return rtdetr.expose_classes(super().new_model(yaml_name, num_classes))

    def check_model(self, model: nn.Module) -> None:
        """Detection's checks, and an input size with at least as many anchors as the decoder
        selects queries (:func:`.models.least_input_size`)."""
        rtdetr.expose_classes(model)
        super().check_model(model)
        least = rtdetr.least_input_size(model)
        if self.input_size < least:
            raise ConfigError(_too_small(self.input_size, least))

    def deploy_module(self, model: nn.Module) -> nn.Module:
        """A float CPU copy with Ultralytics' export form of the decoder (its predictions
        alone, as Ultralytics' exporter sets it)."""
        net = deploy_module(model)
        for m in net.modules():
            if isinstance(m, rtdetr.RTDETRDecoder):
                m.export, m.format = True, "onnx"
        return net


def _too_small(size: int, least: int) -> str:
    return (f"input_size={size} is too small for RT-DETR: its decoder selects 300 queries among "
            f"the anchors of its feature levels (strides 8, 16, 32), which an input under {least} "
            f"px does not hold: pass input_size={least} or more (e.g. 640, its usual size)")


__all__ = ["LEAST_INPUT_SIZE", "RTDETRAdapter"]
