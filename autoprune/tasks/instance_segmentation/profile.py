"""How an instance-segmentation DEFAULT profile is measured (``autoprune profiles build``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ...datasets.scenes import write_yolo_dataset
from .api import analyze_sensitivity, train


def measure_profile(key: str, work_dir: Path, s: dict[str, Any], ratios: tuple[float, ...], *,
                    device: str = "auto", progress: bool = True, data: str | Path | None = None,
                    train_args: dict[str, Any] | None = None) -> tuple[Path, dict[str, Any]]:
    """Train a YOLO-seg model (``yolov8n-seg``... from its YAML) with Ultralytics on Fashion-MNIST
    scenes with polygon labels (``write_yolo_dataset(..., task="segment")``) and measure its mask
    mAP50-95 sensitivities on the val scenes into ``work_dir/sens.json``; ``data`` and
    ``train_args`` as in :func:`autoprune.tasks.detection.profile.measure_profile`."""
    train_args = {"optimizer": "AdamW", "lr0": 0.003, "warmup_epochs": 1,
                  "nbs": s["batch_size"], **(train_args or {})}
    if data is None:
        data_yaml = write_yolo_dataset(work_dir / "scenes", train=s["train_images"],
                                       val=s["val_images"], size=s["input_size"], seed=s["seed"],
                                       task="segment")
        dataset = ("Fashion-MNIST scenes with polygon labels (autoprune.datasets.scenes."
                   "write_yolo_dataset(task='segment'): 1-4 garments per canvas, 10 classes; "
                   "train garments from the train split, val from the test split)")
    else:
        data_yaml, dataset = Path(data), f"user data {Path(data).name}"
    base = train(f"{key}.yaml", data_yaml, epochs=s["epochs"], input_size=s["input_size"],
                 batch_size=s["batch_size"], save_dir=work_dir / "base", device=device,
                 seed=s["seed"], train_args=train_args, progress=progress)
    measured = work_dir / "sens.json"
    analyze_sensitivity(base.baseline_path, data_yaml, measured, ratios=ratios,
                        batch_size=s["batch_size"], device=device, eval_limit=s["val_images"],
                        progress=progress)
    return measured, {"dataset": dataset, "train_args": train_args}
