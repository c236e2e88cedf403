"""One-call pose pruning for Ultralytics YOLO pose models (YOLOv8, YOLO11, YOLO26), PaddleX
style: the detection flow (:mod:`autoprune.tasks.detection.api`) with YOLO pose models.

Ultralytics' pose trainer and validator do the work; keypoint mAP50-95 (OKS) on the val split of a
YOLO pose ``data.yaml`` (``kpt_shape``, keypoint labels) is the metric (``map50_95_pose``), box
mAP is reported beside it. Nothing is downloaded (build from YAML: ``"yolo11n-pose.yaml"``)::

    from autoprune import pose
    from autoprune.datasets.scenes import write_yolo_dataset
    data = write_yolo_dataset("scenes", size=128, task="pose")     # 5 keypoints per garment
    r = pose.train("yolo11n-pose.yaml", data, epochs=30, input_size=128, save_dir="out",
                   sensitivities_file="out/sens.json", pruned_flops=0.4)
    model = pose.load_model(r.pruned_path)  # or YOLO("out/pruned/ultralytics/weights/best.pt")
"""
from __future__ import annotations

from ...flow.contract import TrainResult
from ..detection.api import sub_task_api
from .adapter import PoseAdapter

_TRAIN = """\
Train a YOLO pose model with Ultralytics, and prune it when ``sensitivities_file`` is given.

model: ``"yolov8n-pose.yaml"``, ``"yolo11s-pose.yaml"``, ``"yolo26n-pose.yaml"`` (any of
n/s/m/l/x; built untrained for the data's ``kpt_shape``, nothing is downloaded), a ``.pt``
checkpoint (autoprune's or Ultralytics' — the latter is a pickle: load only files you trust), a
``YOLO`` object or a ``PoseModel``. data: a YOLO pose data.yaml with ``kpt_shape`` (and
``flip_idx`` for flipped training images) and labels ``class cx cy w h`` + keypoints
(``train_data`` is an alias; ``eval_data``: another data.yaml whose val split is evaluated).

The sensitivities are relative losses of keypoint mAP50-95 (``map50_95_pose``, Ultralytics'
OKS mAP); every other setting, the outputs (``baseline/``, ``pruned/`` each with ``best.pt``
and an ``ultralytics/`` run, ``report.*``, ``sensitivity.png``) and ``resume=True`` are as in
:func:`autoprune.detection.train`. The last conv of each box, class and keypoint branch (and
YOLO26's keypoint and spread convs) keep their channels. ``distill=True``: Ultralytics' feature
distillation from the unpruned model (as for detection). Under torchrun it trains as detection
does (DDP on every rank, ``sync_bn`` on GPUs; see docs/multi_gpu.md).
"""

_ANALYZE = """Measure a trained YOLO pose model's
sensitivities (relative keypoint mAP50-95 loss per group and ratio) on the val split of ``data``
into ``save_file`` (resumable; ``eval_limit``: first N val images). ``model_or_checkpoint`` as in
:func:`autoprune.detection.analyze_sensitivity`."""

_EXPORT = """\
Export a (pruned) YOLO pose model or an autoprune checkpoint to ONNX as Ultralytics exports
it: one output ``(batch, 4 + nc + K * ndim, anchors)`` (boxes xywh, class scores, then each
keypoint's x, y in pixels and visibility score; NMS is left to the caller); any batch size
unless ``dynamic_batch`` is False."""

train, analyze_sensitivity, load_model, export_onnx, resume = sub_task_api(
    PoseAdapter, __name__, train=_TRAIN, analyze=_ANALYZE, export=_EXPORT)

__all__ = ["TrainResult", "analyze_sensitivity", "export_onnx", "load_model", "resume", "train"]
