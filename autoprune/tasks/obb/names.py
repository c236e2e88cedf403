"""The Ultralytics YOLO OBB (oriented bounding box, -obb) models autoprune prunes, by name (no Ultralytics import here: the
CLI and profile building read names without loading the model libraries)."""
from __future__ import annotations

from ..detection.names import HeadVariant

NAMES = HeadVariant("-obb", "obb", "an OBB model", " (upright boxes)")
FAMILIES = NAMES.families  # "yolov8n/s/m/l/x-obb, yolo11n/s/m/l/x-obb, yolo26n/s/m/l/x-obb"
canonical_obb_arch = NAMES.canonical  # "yolov8n-obb" of a model stem, or None
resolve_arch = NAMES.resolve  # the key of a model name, or a one-line ConfigError

__all__ = ["FAMILIES", "NAMES", "canonical_obb_arch", "resolve_arch"]
