"""One-call pruning for Ultralytics' RT-DETR (``rtdetr-l``, ``rtdetr-x``), PaddleX style: the
detection flow (:mod:`autoprune.tasks.detection.api`) with RT-DETR models.

Ultralytics' RT-DETR trainer and validator do the work; box mAP50-95 on the val split of a YOLO
``data.yaml`` (or COCO / VOC data, converted as for detection) is the metric. The HGNetv2
backbone and the hybrid encoder's convolutions prune; the encoder's transformer layer (AIFI) and
the transformer decoder keep their widths. Nothing is downloaded (build from YAML:
``"rtdetr-l.yaml"``)::

    from autoprune import rtdetr
    from autoprune.datasets.scenes import write_yolo_dataset
    data = write_yolo_dataset("scenes", size=320)
    r = rtdetr.train("rtdetr-l.yaml", data, epochs=30, input_size=320, save_dir="out",
                     sensitivities_file="out/sens.json", pruned_flops=0.3)
    model = rtdetr.load_model(r.pruned_path)  # or RTDETR("out/pruned/ultralytics/weights/best.pt")
"""
from __future__ import annotations

from ...flow.contract import TrainResult
from ..detection.api import sub_task_api
from .adapter import RTDETRAdapter

_TRAIN = """\
Train an RT-DETR model with Ultralytics, and prune it when ``sensitivities_file`` is given.

model: ``"rtdetr-l.yaml"`` or ``"rtdetr-x.yaml"`` (built untrained, nothing is downloaded), a
``.pt`` checkpoint (autoprune's, or Ultralytics' ``rtdetr-l.pt`` — a pickle read through
Ultralytics' allow-list: load only files you trust), an ``RTDETR`` object or an
``RTDETRDetectionModel``. data: a YOLO data.yaml, a COCO or VOC set (``train_data`` is an
alias; ``eval_data``: another set whose val split is evaluated). ``input_size``: at least 128
(the decoder selects 300 queries among the anchors of its feature levels).

The sensitivities are relative losses of box mAP50-95; the backbone's and the encoder's
convolutions are the groups, the transformer layers keep their widths. Every other setting,
the outputs (``baseline/``, ``pruned/`` each with ``best.pt`` and an ``ultralytics/`` run,
``report.*``, ``sensitivity.png``) and ``resume=True`` are as in
:func:`autoprune.detection.train`. ``distill=True``: Ultralytics' feature distillation from
the unpruned model, where the installed Ultralytics offers it.
"""

_ANALYZE = """Measure a trained RT-DETR model's sensitivities (relative box mAP50-95 loss
per group and ratio) on the val split of ``data`` into ``save_file`` (resumable;
``eval_limit``: first N val images). ``model_or_checkpoint`` as in
:func:`autoprune.detection.analyze_sensitivity`."""

_EXPORT = """\
Export a (pruned) RT-DETR model or an autoprune checkpoint to ONNX as Ultralytics exports
it: one output ``(batch, 300, 4 + nc)`` (the decoder's queries: boxes cx, cy, w, h normalised to
the input size, class scores; no NMS needed); any batch size unless ``dynamic_batch`` is False."""

train, analyze_sensitivity, load_model, export_onnx, resume = sub_task_api(
    RTDETRAdapter, __name__, train=_TRAIN, analyze=_ANALYZE, export=_EXPORT)

__all__ = ["TrainResult", "analyze_sensitivity", "export_onnx", "load_model", "resume", "train"]
