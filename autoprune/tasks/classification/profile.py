"""How a classification DEFAULT profile is measured (``autoprune profiles build``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .api import analyze_sensitivity, train


def measure_profile(key: str, work_dir: Path, s: dict[str, Any], ratios: tuple[float, ...], *,
                    device: str = "auto", progress: bool = True, data: str | Path | None = None,
                    pretrained: Any = None) -> tuple[Path, dict[str, Any]]:
    """Train ``key`` (timm/torchvision) on Fashion-MNIST — or on ``data``, an ImageNet-style
    folder (``train/`` and ``val/`` class folders) or a PaddleX / CSV list root — from scratch or
    from ``pretrained`` weights (``True``: ImageNet's), and measure its top-1 sensitivities on
    ``val_images`` validation images into ``work_dir/sens.json``; returns it and how it was
    made."""
    train_data, eval_data, dataset = _data(data)
    base = train(key, train_data, eval_data, epochs=s["epochs"], batch_size=s["batch_size"],
                 input_size=s["input_size"], train_limit=s["train_images"],
                 eval_limit=s["val_images"], save_dir=work_dir / "base", device=device,
                 seed=s["seed"], progress=progress, pretrained=pretrained or False,
                 resume=True)  # a kept build's folder resumes (a new one starts fresh)
    measured = work_dir / "sens.json"
    analyze_sensitivity(base.baseline_path, eval_data or train_data, measured, ratios=ratios,
                        eval_limit=s["val_images"], device=device, progress=progress)
    return measured, {"dataset": dataset, "optimizer": "sgd",
                      "lr": 0.01 if pretrained else 0.05}


def _data(data: str | Path | None) -> tuple[Any, Any, str]:
    """(train data, eval data, the data set in words) of a profile build."""
    if data is None:
        return "fashion-mnist", None, ("Fashion-MNIST (Debian dataset-fashion-mnist), gray "
                                       "repeated to 3 channels; validation: the first "
                                       "val_images test images")
    root = Path(data)
    if (root / "train").is_dir() and (root / "val").is_dir():  # ImageNet's layout
        return root / "train", root / "val", f"user data {root} (train/ and val/ folders)"
    return root, None, f"user data {root}"
