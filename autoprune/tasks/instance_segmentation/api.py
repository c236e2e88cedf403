"""One-call instance-segmentation pruning for Ultralytics YOLO-seg (YOLOv8, YOLO11, YOLO26),
PaddleX style: the detection flow (:mod:`autoprune.tasks.detection.api`) with YOLO-seg models.

Ultralytics' segment trainer and validator do the work; mask mAP50-95 on the val split of a YOLO-seg
``data.yaml`` (polygon labels) is the metric (``map50_95_mask``), box mAP is reported beside it.
Nothing is downloaded (build from YAML: ``"yolo11n-seg.yaml"``)::

    from autoprune import instance_segmentation as iseg
    from autoprune.datasets.scenes import write_yolo_dataset
    data = write_yolo_dataset("scenes", size=128, task="segment")     # polygon labels
    r = iseg.train("yolo11n-seg.yaml", data, epochs=30, input_size=128, save_dir="out",
                   sensitivities_file="out/sens.json", pruned_flops=0.4)
    model = iseg.load_model(r.pruned_path)  # or YOLO("out/pruned/ultralytics/weights/best.pt")
"""
from __future__ import annotations

from ...flow.contract import TrainResult
from ..detection.api import sub_task_api
from .adapter import InstanceSegmentationAdapter

_TRAIN = """\
Train a YOLO-seg model with Ultralytics, and prune it when ``sensitivities_file`` is given.

model: ``"yolov8n-seg.yaml"``, ``"yolo11s-seg.yaml"``, ``"yolo26n-seg.yaml"`` (any of
n/s/m/l/x; built untrained, nothing is downloaded), a ``.pt`` checkpoint (autoprune's or
Ultralytics' — the latter is a pickle: load only files you trust), a ``YOLO`` object or a
``SegmentationModel``. data: a YOLO-seg data.yaml with polygon labels (``train_data`` is an
alias; ``eval_data``: another data.yaml whose val split is evaluated).

The sensitivities are relative losses of mask mAP50-95 (``map50_95_mask``); every other
setting, the outputs (``baseline/``, ``pruned/`` each with ``best.pt`` and an ``ultralytics/``
run, ``report.*``, ``sensitivity.png``) and ``resume=True`` are as in
:func:`autoprune.detection.train`. The prototype head's last conv, the last conv of each box,
class and mask-coefficient branch keep their channels. ``distill=True``: Ultralytics' feature
distillation from the unpruned model (as for detection). Under torchrun it trains as detection does
(DDP on every rank, ``sync_bn`` on GPUs; see docs/multi_gpu.md).
"""

_ANALYZE = """Measure a trained YOLO-seg model's
sensitivities (relative mask mAP50-95 loss per group and ratio) on the val split of ``data`` into
``save_file`` (resumable; ``eval_limit``: first N val images). ``model_or_checkpoint`` as in
:func:`autoprune.detection.analyze_sensitivity`."""

_EXPORT = """\
Export a (pruned) YOLO-seg model or an autoprune checkpoint to ONNX as Ultralytics exports
it: ``output0`` ``(batch, 4 + nc + 32, anchors)`` (boxes xywh, class scores, mask
coefficients; NMS is left to the caller) and ``output1`` ``(batch, 32, size/4, size/4)`` (the
mask prototypes); any batch size unless ``dynamic_batch`` is False."""

train, analyze_sensitivity, load_model, export_onnx, resume = sub_task_api(
    InstanceSegmentationAdapter, __name__, train=_TRAIN, analyze=_ANALYZE, export=_EXPORT)

__all__ = ["TrainResult", "analyze_sensitivity", "export_onnx", "load_model", "resume", "train"]
