"""One-call oriented-box (OBB) pruning for Ultralytics YOLO OBB models (YOLOv8, YOLO11, YOLO26),
PaddleX style: the detection flow (:mod:`autoprune.tasks.detection.api`) with YOLO OBB models.

Ultralytics' OBB trainer and validator do the work; rotated-box mAP50-95 on the val split of a YOLO
OBB ``data.yaml`` (labels: the 4 corners of each rotated box) is the metric (``map50_95_obb``).
Nothing is downloaded (build from YAML: ``"yolo11n-obb.yaml"``)::

    from autoprune import obb
    from autoprune.datasets.scenes import write_yolo_dataset
    data = write_yolo_dataset("scenes", size=128, task="obb")     # rotated garments
    r = obb.train("yolo11n-obb.yaml", data, epochs=30, input_size=128, save_dir="out",
                  sensitivities_file="out/sens.json", pruned_flops=0.4)
    model = obb.load_model(r.pruned_path)  # or YOLO("out/pruned/ultralytics/weights/best.pt")
"""
from __future__ import annotations

from ...flow.contract import TrainResult
from ..detection.api import sub_task_api
from .adapter import OBBAdapter

_TRAIN = """\
Train a YOLO OBB (oriented box) model with Ultralytics, and prune it when \
``sensitivities_file`` is given.

model: ``"yolov8n-obb.yaml"``, ``"yolo11s-obb.yaml"``, ``"yolo26n-obb.yaml"`` (any of
n/s/m/l/x; built untrained, nothing is downloaded), a ``.pt`` checkpoint (autoprune's or
Ultralytics' — the latter is a pickle: load only files you trust), a ``YOLO`` object or an
``OBBModel``. data: a YOLO OBB data.yaml whose labels are the 4 corners ``class x1 y1 x2 y2 x3
y3 x4 y4`` of each rotated box (``train_data`` is an alias; ``eval_data``: another data.yaml
whose val split is evaluated).

The sensitivities are relative losses of rotated-box mAP50-95 (``map50_95_obb``); every other
setting, the outputs (``baseline/``, ``pruned/`` each with ``best.pt`` and an ``ultralytics/``
run, ``report.*``, ``sensitivity.png``) and ``resume=True`` are as in
:func:`autoprune.detection.train`. The last conv of each box, class and angle branch keeps its
channels. ``distill=True``: Ultralytics' feature distillation from the unpruned model (as for
detection). Under torchrun it trains as detection does (DDP on every rank, ``sync_bn`` on GPUs;
see docs/multi_gpu.md).
"""

_ANALYZE = """Measure a trained YOLO OBB model's
sensitivities (relative rotated-box mAP50-95 loss per group and ratio) on the val split of
``data`` into ``save_file`` (resumable; ``eval_limit``: first N val images).
``model_or_checkpoint`` as in :func:`autoprune.detection.analyze_sensitivity`."""

_EXPORT = """\
Export a (pruned) YOLO OBB model or an autoprune checkpoint to ONNX as Ultralytics exports
it: one output ``(batch, 4 + nc + 1, anchors)`` (rotated boxes' centre and size xywh in
pixels, class scores, angle in radians; rotated NMS is left to the caller); any batch size
unless ``dynamic_batch`` is False."""

train, analyze_sensitivity, load_model, export_onnx, resume = sub_task_api(
    OBBAdapter, __name__, train=_TRAIN, analyze=_ANALYZE, export=_EXPORT)

__all__ = ["TrainResult", "analyze_sensitivity", "export_onnx", "load_model", "resume", "train"]
