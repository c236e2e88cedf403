"""The Ultralytics YOLO pose models autoprune prunes, by name (no Ultralytics import here: the CLI
and profile building read names without loading the model libraries)."""
from __future__ import annotations

import re
from pathlib import Path

from ...errors import ConfigError
from ..detection.names import canonical_arch

POSE_FAMILIES = ("yolov8", "yolo11", "yolo26")  # Ultralytics ships a -pose YAML for each
FAMILIES = "yolov8n/s/m/l/x-pose, yolo11n/s/m/l/x-pose, yolo26n/s/m/l/x-pose"
SUFFIX = "-pose"


def canonical_pose_arch(stem: str) -> str | None:
    """The key (``yolov8n-pose``, ``yolo11s-pose``...) of a model stem, None when it is not a
    YOLO pose model of :data:`POSE_FAMILIES`."""
    if not stem.endswith(SUFFIX):
        return None
    key = canonical_arch(stem[:-len(SUFFIX)])
    if key and key.startswith(POSE_FAMILIES) and key[-1] in "nsmlx":
        return f"{key}{SUFFIX}"
    return None


def resolve_arch(name: str) -> str:
    """Canonical key (``yolov8n-pose``...) of a model name such as ``"yolo11n-pose.yaml"``; a
    one-line ConfigError that names the supported models otherwise."""
    stem = re.sub(r"\.(ya?ml|pt)$", "", Path(str(name)).name.lower())
    key = canonical_pose_arch(stem)
    if key:
        return key
    if canonical_arch(stem):
        raise ConfigError(f"{name!r} is a detection model: autoprune.pose prunes {FAMILIES} "
                          f"(or use autoprune.detection)")
    if stem.startswith("yolo"):  # another family (yolo12n-pose) or task (yolov8n-seg)
        raise ConfigError(f"{name!r} is not a pose model autoprune prunes: use one of "
                          f"{FAMILIES} (e.g. 'yolo11n-pose.yaml')")
    raise ConfigError(f"unknown model name {name!r}: use one of {FAMILIES} (e.g. "
                      f"'yolo11n-pose.yaml'), a .pt checkpoint or a YOLO object")
