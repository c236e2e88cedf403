"""How a segmentation DEFAULT profile is measured (``autoprune profiles build``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .api import analyze_sensitivity, train


def measure_profile(key: str, work_dir: Path, s: dict[str, Any], ratios: tuple[float, ...], *,
                    device: str = "auto", progress: bool = True) -> tuple[Path, dict[str, Any]]:
    """Train an smp model (``smp/unet/resnet18``..., random encoder weights) on the in-memory
    Fashion-MNIST scenes ("fashion-scenes", 11 classes with the background) and measure its mIoU
    sensitivities on ``val_images`` test scenes into ``work_dir/sens.json``."""
    base = train(key, train_data="fashion-scenes", epochs=s["epochs"], batch_size=s["batch_size"],
                 input_size=s["input_size"], train_limit=s["train_images"],
                 eval_limit=s["val_images"], save_dir=work_dir / "base", device=device,
                 seed=s["seed"], progress=progress)
    measured = work_dir / "sens.json"
    analyze_sensitivity(base.baseline_path, "fashion-scenes", measured, ratios=ratios,
                        batch_size=s["batch_size"], device=device, eval_limit=s["val_images"],
                        progress=progress)
    return measured, {"dataset": "Fashion-MNIST scenes (autoprune 'fashion-scenes': garments on "
                      "textured backgrounds, masks 0 = background, class + 1; train garments "
                      "from the train split, val from the test split)",
                      "optimizer": "adamw", "lr": 1e-3, "loss": "dice + cross-entropy"}
