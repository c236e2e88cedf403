"""How a segmentation DEFAULT profile is measured (``autoprune profiles build``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .api import analyze_sensitivity, train


def measure_profile(key: str, work_dir: Path, s: dict[str, Any], ratios: tuple[float, ...], *,
                    device: str = "auto", progress: bool = True, data: str | Path | None = None,
                    pretrained: Any = None) -> tuple[Path, dict[str, Any]]:
    """Train an smp model (``smp/unet/resnet18``...) on the in-memory Fashion-MNIST scenes
    ("fashion-scenes", 11 classes with the background) — or on ``data``, a VOC / Cityscapes /
    PaddleX / images+masks root — its encoder from random or ``pretrained`` weights (``True``:
    smp's "imagenet"), and measure its mIoU sensitivities on ``val_images`` validation images
    into ``work_dir/sens.json``."""
    train_data = "fashion-scenes" if data is None else str(data)
    weights = ("imagenet" if pretrained is True else pretrained) or None
    base = train(key, train_data=train_data, epochs=s["epochs"], batch_size=s["batch_size"],
                 input_size=s["input_size"], train_limit=s["train_images"],
                 eval_limit=s["val_images"], save_dir=work_dir / "base", device=device,
                 seed=s["seed"], progress=progress, encoder_weights=weights,
                 resume=True)  # a kept build's folder resumes (a new one starts fresh)
    measured = work_dir / "sens.json"
    analyze_sensitivity(base.baseline_path, train_data, measured, ratios=ratios,
                        batch_size=s["batch_size"], device=device, eval_limit=s["val_images"],
                        progress=progress)
    dataset = ("Fashion-MNIST scenes (autoprune 'fashion-scenes': garments on textured "
               "backgrounds, masks 0 = background, class + 1; train garments from the train "
               "split, val from the test split)") if data is None else f"user data {data}"
    return measured, {"dataset": dataset, "optimizer": "adamw", "lr": 1e-3,
                      "loss": "dice + cross-entropy"}
