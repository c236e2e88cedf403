"""The Ultralytics YOLO pose (-pose) models autoprune prunes, by name: the
detection names with the suffix ``-pose`` (:class:`~..detection.names.HeadVariant`; no Ultralytics
import here, so the CLI and profile building read names without loading the model libraries)."""
from __future__ import annotations

from ..detection.names import HeadVariant

NAMES = HeadVariant("-pose", "pose", "a pose model",
                    head_sizes=(("-p6", ("yolov8",)),))  # yolov8n-pose-p6 (Ultralytics' YAMLs)
resolve_arch = NAMES.resolve  # the key of a model name, or a one-line ConfigError (the registry's)

__all__ = ["NAMES", "resolve_arch"]
