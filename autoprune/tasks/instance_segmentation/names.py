"""The Ultralytics YOLO instance segmentation (-seg) models autoprune prunes, by name (no Ultralytics import here: the
CLI and profile building read names without loading the model libraries)."""
from __future__ import annotations

from ..detection.names import HeadVariant

NAMES = HeadVariant("-seg", "instance_segmentation", "an instance segmentation model")
FAMILIES = NAMES.families  # "yolov8n/s/m/l/x-seg, yolo11n/s/m/l/x-seg, yolo26n/s/m/l/x-seg"
canonical_seg_arch = NAMES.canonical  # "yolov8n-seg" of a model stem, or None
resolve_arch = NAMES.resolve  # the key of a model name, or a one-line ConfigError

__all__ = ["FAMILIES", "NAMES", "canonical_seg_arch", "resolve_arch"]
