"""The Ultralytics YOLO pose (-pose) models autoprune prunes, by name (no Ultralytics import here: the
CLI and profile building read names without loading the model libraries)."""
from __future__ import annotations

from ..detection.names import HeadVariant

NAMES = HeadVariant("-pose", "pose", "a pose model")
FAMILIES = NAMES.families  # "yolov8n/s/m/l/x-pose, yolo11n/s/m/l/x-pose, yolo26n/s/m/l/x-pose"
canonical_pose_arch = NAMES.canonical  # "yolov8n-pose" of a model stem, or None
resolve_arch = NAMES.resolve  # the key of a model name, or a one-line ConfigError

__all__ = ["FAMILIES", "NAMES", "canonical_pose_arch", "resolve_arch"]
