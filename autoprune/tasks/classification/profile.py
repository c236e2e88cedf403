"""How a classification DEFAULT profile is measured (``autoprune profiles build``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .api import analyze_sensitivity, train


def measure_profile(key: str, work_dir: Path, s: dict[str, Any], ratios: tuple[float, ...], *,
                    device: str = "auto", progress: bool = True) -> tuple[Path, dict[str, Any]]:
    """Train ``key`` (timm/torchvision) on Fashion-MNIST and measure its top-1 sensitivities on
    the first ``val_images`` test images into ``work_dir/sens.json``; returns it and how it was
    made."""
    base = train(key, "fashion-mnist", epochs=s["epochs"], batch_size=s["batch_size"], lr=0.05,
                 input_size=s["input_size"], train_limit=s["train_images"],
                 eval_limit=s["val_images"], save_dir=work_dir / "base", device=device,
                 seed=s["seed"], progress=progress)
    measured = work_dir / "sens.json"
    analyze_sensitivity(base.baseline_path, "fashion-mnist", measured, ratios=ratios,
                        eval_limit=s["val_images"], device=device, progress=progress)
    return measured, {"dataset": "Fashion-MNIST (Debian dataset-fashion-mnist), gray repeated to "
                      "3 channels; validation: the first val_images test images",
                      "optimizer": "sgd", "lr": 0.05}
