"""How a detection DEFAULT profile is measured (``autoprune profiles build``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ...datasets.scenes import write_yolo_dataset
from .api import analyze_sensitivity, train


def measure_profile(key: str, work_dir: Path, s: dict[str, Any], ratios: tuple[float, ...], *,
                    device: str = "auto", progress: bool = True, data: str | Path | None = None,
                    train_args: dict[str, Any] | None = None,
                    pretrained: Any = None) -> tuple[Path, dict[str, Any]]:
    """Train a YOLO model (``yolov8n``... from its YAML) with Ultralytics on Fashion-MNIST scenes
    (``train_images`` / ``val_images`` canvases of ``input_size`` px with 1-4 garments, written
    by ``write_yolo_dataset`` with the seed) and measure its mAP50-95 sensitivities on the val
    scenes into ``work_dir/sens.json``. ``data``: an existing data set to use instead (a
    data.yaml, a COCO or VOC root; then recorded as the dataset). ``train_args`` go to
    Ultralytics' trainer over the small-set defaults (AdamW, lr0 0.003, one warm-up epoch, a
    step per batch). ``pretrained``: start from Ultralytics' COCO weights (``<key>.pt``)."""
    return measure_with(train, analyze_sensitivity, key, work_dir, s, ratios, device=device,
                        progress=progress, data=data, train_args=train_args,
                        pretrained=pretrained)


SCENES = ("detect", "")  # detection's scenes: boxes (Ultralytics' task, its labels in words)


def measure_with(train_fn: Callable[..., Any], analyze_fn: Callable[..., Any], key: str,
                 work_dir: Path, s: dict[str, Any], ratios: tuple[float, ...], *,
                 scenes: tuple[str, str] = SCENES, device: str = "auto", progress: bool = True,
                 data: str | Path | None = None, train_args: dict[str, Any] | None = None,
                 pretrained: Any = None) -> tuple[Path, dict[str, Any]]:
    """:func:`measure_profile` for a YOLO task whose API has ``train_fn`` / ``analyze_fn``:
    ``scenes`` is the Ultralytics task whose labels the scenes carry
    (:func:`~autoprune.datasets.scenes.write_yolo_dataset`) and those labels in words for the
    profile's record (a sub-task says both for its own scenes)."""
    scenes_task, scenes_label = scenes
    # Ultralytics' defaults suit large sets; a small set wants a step per batch and AdamW
    train_args = {"optimizer": "AdamW", "lr0": 0.003, "warmup_epochs": 1,
                  "nbs": s["batch_size"], **(train_args or {})}
    if data is None:
        data_yaml = write_yolo_dataset(work_dir / "scenes", train=s["train_images"],
                                       val=s["val_images"], size=s["input_size"], seed=s["seed"],
                                       task=scenes_task)
        dataset = (f"Fashion-MNIST scenes{scenes_label} (autoprune.datasets."
                   f"scenes.write_yolo_dataset(task={scenes_task!r}): 1-4 garments per canvas, "
                   f"10 classes; train garments from the train split, val from the test split)")
    else:
        data_yaml, dataset = Path(data), f"user data {Path(data).name}"
    model = f"{key}.pt" if pretrained else f"{key}.yaml"  # Ultralytics' weights, or its YAML
    base = train_fn(model, data_yaml, epochs=s["epochs"], input_size=s["input_size"],
                    batch_size=s["batch_size"], save_dir=work_dir / "base", device=device,
                    seed=s["seed"], train_args=train_args, progress=progress,
                    resume=True)  # a kept build's folder resumes (a new one starts fresh)
    measured = work_dir / "sens.json"
    analyze_fn(base.baseline_path, data_yaml, measured, ratios=ratios,
               batch_size=s["batch_size"], device=device, eval_limit=s["val_images"],
               progress=progress)
    return measured, {"dataset": dataset, "train_args": train_args}
