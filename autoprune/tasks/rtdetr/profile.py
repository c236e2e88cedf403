"""How an RT-DETR DEFAULT profile is measured (``autoprune profiles build``): trained and
analysed on the detection scenes, as detection's (:func:`~..detection.profile.measure_with`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..detection.profile import SCENES, measure_with  # detection's scenes (upright boxes)
from .api import analyze_sensitivity, train


def measure_profile(key: str, work_dir: Path, s: dict[str, Any], ratios: tuple[float, ...], *,
                    device: str = "auto", progress: bool = True, data: str | Path | None = None,
                    train_args: dict[str, Any] | None = None) -> tuple[Path, dict[str, Any]]:
    """Train an RT-DETR model (``rtdetr-l`` from its YAML) with Ultralytics on Fashion-MNIST
    scenes (``write_yolo_dataset``) and measure its box mAP50-95 sensitivities on the val scenes
    into ``work_dir/sens.json``; ``data`` and ``train_args`` as in
    :func:`autoprune.tasks.detection.profile.measure_profile`."""
    return measure_with(train, analyze_sensitivity, key, work_dir, s, ratios, scenes=SCENES,
                        device=device, progress=progress, data=data, train_args=train_args)
