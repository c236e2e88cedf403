"""How a pose DEFAULT profile is measured (``autoprune profiles build``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..detection.profile import measure_with
from .api import analyze_sensitivity, train

# its scenes: Ultralytics' task whose labels they carry, and those labels in words for the
# profile's record (after "Fashion-MNIST scenes")
SCENES = ("pose", " with 5 keypoints per garment, the corners of its box and its centre")


def measure_profile(key: str, work_dir: Path, s: dict[str, Any], ratios: tuple[float, ...], *,
                    device: str = "auto", progress: bool = True, data: str | Path | None = None,
                    train_args: dict[str, Any] | None = None) -> tuple[Path, dict[str, Any]]:
    """Train a YOLO pose model (``yolov8n-pose``... from its YAML) with Ultralytics on
    Fashion-MNIST scenes with keypoints (``write_yolo_dataset(..., task="pose")``) and measure
    its keypoint mAP50-95 sensitivities on the val scenes into ``work_dir/sens.json``; ``data``
    and ``train_args`` as in :func:`autoprune.tasks.detection.profile.measure_profile`."""
    return measure_with(train, analyze_sensitivity, key, work_dir, s, ratios, scenes=SCENES,
                        device=device, progress=progress, data=data, train_args=train_args)
