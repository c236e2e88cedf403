"""The YOLO family's deployed models: the metadata Ultralytics reads from an ONNX file (so that
``YOLO("model_int8.onnx")`` knows its classes, stride and input size), the calibration images of an
INT8 model (train images letterboxed as Ultralytics validates), and the validation of an ONNX
file (FP32 or INT8) by Ultralytics' own validator, run by ONNX Runtime.

Nothing here names a YOLO sub-task: the task and its validator come from the adapter, and a
sub-task's adapter adds its own metadata (:meth:`~.adapter.DetectionAdapter.onnx_metadata`).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ...engine.fast_copy import fast_deepcopy
from ...errors import ConfigError
from . import models as yolo  # first: Ultralytics set up offline


def ultralytics_metadata(model: nn.Module, *, task: str, names: dict[int, str] | None,
                         input_size: int) -> dict[str, Any]:
    """What Ultralytics' exporter writes into an ONNX file's ``metadata_props`` and its
    ``AutoBackend`` reads back: stride, task, batch, image size, class names, the export's
    arguments (a dynamic batch, no NMS in the graph), channels and whether the head is
    end-to-end."""
    from ultralytics import __version__

    stride = getattr(model, "stride", None)
    stride = int(max(stride.tolist())) if torch.is_tensor(stride) else int(stride or 32)
    head = model.model[-1] if hasattr(model, "model") and len(model.model) else None
    names = names or getattr(model, "names", None) or {}
    meta: dict[str, Any] = {
        "description": "Ultralytics YOLO model pruned by autoprune", "author": "autoprune",
        "version": __version__, "stride": stride, "task": task,
        "head": type(head).__name__ if head is not None else "Detect", "batch": 1,
        "imgsz": [int(input_size), int(input_size)],
        "names": {int(k): str(v) for k, v in dict(names).items()},
        "args": {"batch": 1, "dynamic": True, "nms": False, "half": False, "int8": False},
        "channels": 3, "end2end": bool(getattr(head, "end2end", False))}
    return meta


def deploy_module(model: nn.Module) -> nn.Module:
    """A float CPU copy of ``model`` with Ultralytics' export head (one output tensor per head;
    what ONNX Runtime runs)."""
    net = fast_deepcopy(model).float().cpu().eval()
    for m in net.modules():
        if isinstance(m, yolo.Detect):
            m.export, m.format = True, "onnx"
    return net


def calibration_images(adapter: Any, limit: int) -> list[torch.Tensor]:
    """Up to ``limit`` images of the train split, spread over it, letterboxed to the adapter's
    input size as Ultralytics' validator feeds them (no augmentation), as float batches in
    [0, 1]."""
    from ultralytics.cfg import get_cfg
    from ultralytics.data import build_yolo_dataset

    data = adapter.data
    if data is None or not data.get("train"):
        raise ConfigError("quantize='int8' calibrates on the train split: pass data=<data.yaml> "
                          "with a train split")
    images = list(data["train"])
    step = max(1, len(images) // max(1, limit))
    picked = images[::step][:limit]
    cfg = get_cfg(overrides={"imgsz": adapter.input_size, "task": adapter.yolo_task,
                             "rect": False, "cache": False})
    out, batch = [], []
    with tempfile.TemporaryDirectory(prefix="autoprune-calib-") as folder, yolo.quiet():
        listing = Path(folder) / "calibration.txt"  # Ultralytics reads image lists from a file
        listing.write_text("".join(f"{Path(p).resolve()}\n" for p in picked))
        dataset = build_yolo_dataset(cfg, str(listing), 1, {
            **data["cfg"], "names": data["names"], "nc": len(data["names"])}, mode="val",
            rect=False)
        for i in range(len(dataset)):
            batch.append(dataset[i]["img"].float() / 255.0)
            if len(batch) == 16 or i == len(dataset) - 1:
                out.append(torch.stack(batch))
                batch = []
    return out


def validate_onnx(adapter: Any, onnx: bytes | str | os.PathLike
                  ) -> dict[str, float]:
    """The task's metrics (mAP50-95...) of an ONNX file (or bytes) from Ultralytics' validator,
    the model run by ONNX Runtime (Ultralytics' ``AutoBackend``) on the (limited) val split,
    square letterboxed batches (an exported graph has a fixed input size)."""
    if adapter.eval_data is None:
        raise ConfigError("evaluation needs data=<data.yaml> with a val split")
    with tempfile.TemporaryDirectory(prefix="autoprune-onnx-") as folder:
        path = Path(onnx) if not isinstance(onnx, (bytes, bytearray)) else \
            Path(folder) / "model.onnx"
        if isinstance(onnx, (bytes, bytearray)):
            path.write_bytes(onnx)
        args = {"data": str(adapter._val_data_yaml()), "imgsz": adapter.input_size,
                "batch": adapter.batch_size, "device": "cpu", "plots": False, "verbose": False,
                "save_json": False, "workers": adapter.num_workers, "task": adapter.yolo_task,
                "split": "val", "rect": False}
        threads = torch.get_num_threads()
        try:
            with yolo.quiet(), yolo.one_process():
                validator = adapter.validator_class(save_dir=Path(folder) / "val", args=args)
                stats = validator(model=str(path))
        finally:
            torch.set_num_threads(threads)
    return adapter.metrics_of(stats)
