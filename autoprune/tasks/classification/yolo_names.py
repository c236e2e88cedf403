"""The names of Ultralytics' YOLO classification models (``yolov8n-cls``, ``yolo11n-cls``,
``yolo26n-cls`` at every scale n/s/m/l/x) for the classification task, read without importing
Ultralytics (the CLI and profile building read names); :mod:`.yolo_cls` builds and loads them."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch.nn as nn

SOURCE = "ultralytics"
FAMILIES = ("yolov8", "yolo11", "yolo26")  # Ultralytics ships their -cls YAMLs
NAMES = "yolov8n/s/m/l/x-cls, yolo11n/s/m/l/x-cls, yolo26n/s/m/l/x-cls"
_NAME = re.compile(rf"({'|'.join(FAMILIES)})([nsmlx])-cls")


def stem(name: str | os.PathLike) -> str:
    """``"yolo11n-cls"`` of ``"path/YOLO11n-cls.pt"``, ``"yolo11n-cls.yaml"``..."""
    return re.sub(r"\.(ya?ml|pt)$", "", Path(str(name)).name.lower())


def canonical(name: str | os.PathLike) -> str | None:
    """``ultralytics/yolo11n-cls`` of a name such as ``"yolo11n-cls.yaml"``, ``"yolo11n-cls.pt"``
    or ``"ultralytics/yolo11n-cls"``; None when it names no YOLO classification model."""
    text = str(name)
    if text.startswith(f"{SOURCE}/"):
        text = text[len(SOURCE) + 1:]
    found = stem(text)
    return f"{SOURCE}/{found}" if _NAME.fullmatch(found) else None


def refusal(name: str) -> str | None:
    """A one-line reason for a YOLO classification name autoprune does not prune (another
    family, a ResNet-backbone YAML, a scale that does not exist), or None when ``name`` is not
    a YOLO classification name at all."""
    found = stem(name.split("/", 1)[1] if name.startswith(f"{SOURCE}/") else name)
    if name.startswith(f"{SOURCE}/") or (found.startswith("yolo") and "-cls" in found):
        return (f"{name!r} is not a YOLO classification model autoprune prunes: use one of "
                f"{NAMES} (e.g. 'yolo11n-cls.yaml', or its .pt weights)")
    return None


def is_weights_name(model: Any) -> bool:
    """True for a ``.pt`` name of a YOLO classification model (``yolo11n-cls.pt``: a file, or
    Ultralytics' published weights of that name)."""
    return isinstance(model, (str, os.PathLike)) and str(model).lower().endswith(".pt") \
        and canonical(model) is not None


def is_yolo_classifier(model: Any) -> bool:
    """True for Ultralytics' ClassificationModel (told without importing Ultralytics)."""
    return isinstance(model, nn.Module) and type(model).__name__ == "ClassificationModel" \
        and type(model).__module__.startswith("ultralytics.")


__all__ = ["FAMILIES", "NAMES", "SOURCE", "canonical", "is_weights_name", "is_yolo_classifier",
           "refusal", "stem"]
