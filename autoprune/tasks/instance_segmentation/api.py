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

import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch.nn as nn

from ...engine.sensitivity import DEFAULT_RATIOS
from ...flow import checkpoints
from ...flow.checkpoints import checkpoint_meta
from ..base import TrainResult
from ..detection.api import analyze_with, resume_with, train_with
from .adapter import InstanceSegmentationAdapter


def train(model: str | nn.Module | Any, data: str | os.PathLike | None = None, *,
          epochs: int = 100, input_size: int | None = None, batch_size: int | None = None,
          pretrain_weights: str | os.PathLike | None = None,
          sensitivities_file: str | os.PathLike | None = None,
          eval_metric_loss: float | None = None, pruned_flops: float | None = None,
          pruned_latency: float | None = None, latency_device: str = "cpu",
          latency_threads: int | None = None, latency_batch: int = 1,
          save_dir: str | os.PathLike = "output",
          device: str = "auto", eval_data: str | os.PathLike | None = None,
          pretrain_epochs: int | None = None, criterion: str = "l1_norm",
          round_to: int | None = None, ratios: Iterable[float] = DEFAULT_RATIOS,
          eval_limit: int | None = None, num_workers: int | None = None,
          train_args: dict[str, Any] | None = None, seed: int = 0, progress: bool = True,
          sensitivity_options: Mapping[str, Any] | None = None,
          train_data: str | os.PathLike | None = None, resume: bool = False,
          distill: bool | dict[str, float] = False, prune_steps: int = 1,
          sync_bn: bool = False) -> TrainResult:
    """Train a YOLO-seg model with Ultralytics, and prune it when ``sensitivities_file`` is given.

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
    distillation from the unpruned model (as for detection). Under torchrun it trains as detection does (DDP on every rank, ``sync_bn`` on
    GPUs; see docs/multi_gpu.md).
    """
    return train_with(InstanceSegmentationAdapter, locals())


def analyze_sensitivity(model_or_checkpoint: str | os.PathLike | nn.Module | Any,
                        data: str | os.PathLike, save_file: str | os.PathLike, *,
                        pretrain_weights: str | os.PathLike | None = None,
                        input_size: int | None = None, batch_size: int | None = None,
                        device: str = "auto", criterion: str = "l1_norm",
                        ratios: Iterable[float] = DEFAULT_RATIOS,
                        eval_limit: int | None = None, num_workers: int | None = None,
                        progress: bool = True,
                        sensitivity_options: Mapping[str, Any] | None = None
                        ) -> dict[str, dict[float, float]]:
    """Measure a trained YOLO-seg model's sensitivities (relative mask mAP50-95 loss per group and
    ratio) on the val split of ``data`` into ``save_file`` (resumable; ``eval_limit``: first N val
    images). ``model_or_checkpoint`` as in :func:`autoprune.detection.analyze_sensitivity`."""
    return analyze_with(InstanceSegmentationAdapter, locals())


def load_model(path: str | os.PathLike, base_model: nn.Module | None = None) -> nn.Module:
    """Load a checkpoint written by ``train`` (pruned or not), weights-only, in eval mode: a patched
    Ultralytics ``SegmentationModel`` (``model(x)`` gives Ultralytics' raw predictions)."""
    return checkpoints.load_model(path, InstanceSegmentationAdapter(), base_model=base_model)


def export_onnx(model: nn.Module | str | os.PathLike, path: str | os.PathLike,
                input_size: int | None = None, opset_version: int = 17, *,
                dynamic_batch: bool = True) -> Path:
    """Export a (pruned) YOLO-seg model or an autoprune checkpoint to ONNX as Ultralytics exports
    it: ``output0`` ``(batch, 4 + nc + 32, anchors)`` (boxes xywh, class scores, mask
    coefficients; NMS is left to the caller) and ``output1`` ``(batch, 32, size/4, size/4)`` (the
    mask prototypes); any batch size unless ``dynamic_batch`` is False."""
    if isinstance(model, (str, os.PathLike)):
        input_size = input_size or checkpoint_meta(model).get("input_size")
        model = load_model(model)
    adapter = InstanceSegmentationAdapter(input_size=input_size or 640)
    return adapter.export_onnx(model, Path(path), opset_version, dynamic_batch=dynamic_batch)


def resume(last: str | os.PathLike, progress: bool = True) -> nn.Module:
    """Finish an interrupted training run from ``<save_dir>/ultralytics/weights/last.pt`` with the
    pruned module itself (as :func:`autoprune.detection.resume`); returns the best model."""
    return resume_with(InstanceSegmentationAdapter, last, progress)


__all__ = ["TrainResult", "analyze_sensitivity", "export_onnx", "load_model", "resume", "train"]
