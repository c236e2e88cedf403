"""The Ultralytics YOLO OBB (oriented bounding box) models autoprune prunes, by name (no
Ultralytics import here: the CLI and profile building read names without loading the model
libraries)."""
from __future__ import annotations

import re
from pathlib import Path

from ...errors import ConfigError
from ..detection.names import canonical_arch

OBB_FAMILIES = ("yolov8", "yolo11", "yolo26")  # Ultralytics ships an -obb YAML for each
FAMILIES = "yolov8n/s/m/l/x-obb, yolo11n/s/m/l/x-obb, yolo26n/s/m/l/x-obb"
SUFFIX = "-obb"


def canonical_obb_arch(stem: str) -> str | None:
    """The key (``yolov8n-obb``, ``yolo11s-obb``...) of a model stem, None when it is not a YOLO
    OBB model of :data:`OBB_FAMILIES`."""
    if not stem.endswith(SUFFIX):
        return None
    key = canonical_arch(stem[:-len(SUFFIX)])
    if key and key.startswith(OBB_FAMILIES) and key[-1] in "nsmlx":
        return f"{key}{SUFFIX}"
    return None


def resolve_arch(name: str) -> str:
    """Canonical key (``yolov8n-obb``...) of a model name such as ``"yolo11n-obb.yaml"``; a
    one-line ConfigError that names the supported models otherwise."""
    stem = re.sub(r"\.(ya?ml|pt)$", "", Path(str(name)).name.lower())
    key = canonical_obb_arch(stem)
    if key:
        return key
    if canonical_arch(stem):
        raise ConfigError(f"{name!r} is a detection model (upright boxes): autoprune.obb prunes "
                          f"{FAMILIES} (or use autoprune.detection)")
    if stem.startswith("yolo"):  # another family (yolo12n-obb) or task (yolov8n-pose)
        raise ConfigError(f"{name!r} is not an OBB model autoprune prunes: use one of "
                          f"{FAMILIES} (e.g. 'yolo11n-obb.yaml')")
    raise ConfigError(f"unknown model name {name!r}: use one of {FAMILIES} (e.g. "
                      f"'yolo11n-obb.yaml'), a .pt checkpoint or a YOLO object")
