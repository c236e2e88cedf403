"""The Ultralytics YOLO-seg models autoprune prunes, by name (no Ultralytics import here: the CLI
and profile building read names without loading the model libraries)."""
from __future__ import annotations

import re
from pathlib import Path

from ...errors import ConfigError
from ..detection.names import canonical_arch

SEG_FAMILIES = ("yolov8", "yolo11", "yolo26")  # Ultralytics ships a -seg YAML for each
FAMILIES = "yolov8n/s/m/l/x-seg, yolo11n/s/m/l/x-seg, yolo26n/s/m/l/x-seg"


def canonical_seg_arch(stem: str) -> str | None:
    """The key (``yolov8n-seg``, ``yolo11s-seg``...) of a model stem, None when it is not a YOLO-seg
    model of :data:`SEG_FAMILIES`."""
    if not stem.endswith("-seg"):
        return None
    key = canonical_arch(stem[:-len("-seg")])
    if key and key.startswith(SEG_FAMILIES) and key[-1] in "nsmlx":
        return f"{key}-seg"
    return None


def resolve_arch(name: str) -> str:
    """Canonical key (``yolov8n-seg``...) of a model name such as ``"yolo11n-seg.yaml"``; a
    ConfigError that names the supported models otherwise."""
    stem = re.sub(r"\.(ya?ml|pt)$", "", Path(str(name)).name.lower())
    key = canonical_seg_arch(stem)
    if key:
        return key
    if canonical_arch(stem):
        raise ConfigError(f"{name!r} is a detection model: autoprune.instance_segmentation prunes "
                          f"{FAMILIES} (or use autoprune.detection)")
    raise ConfigError(f"unknown model name {name!r}: use one of {FAMILIES} (e.g. "
                      f"'yolo11n-seg.yaml'), a .pt checkpoint or a YOLO object")
