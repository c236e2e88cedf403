"""Building DEFAULT sensitivity profiles on public data (``autoprune profiles build``).

One builder per task trains the architecture on data anyone can regenerate — Fashion-MNIST for
classification, the Fashion-MNIST scenes (``autoprune.datasets.scenes``) for detection and
segmentation — measures its sensitivities through the task's ``analyze_sensitivity``, and hands the
file to :func:`finish_profile`, which records how it was made, writes it to ``out_dir`` and adds it
to ``out_dir/index.json``. :func:`build_profile` picks the builder from the architecture key.
"""
from __future__ import annotations

import datetime
import re
import tempfile
from pathlib import Path
from typing import Any, Iterable

from .arguments import check_numbers
from .errors import ConfigError
from .sensitivity import DEFAULT_RATIOS
from .tasks.yolo_names import canonical_arch

# settings of a rebuild, per task: sensible on a GPU, still possible on a CPU
DEFAULTS: dict[str, dict[str, Any]] = {
    "classification": dict(epochs=3, train_images=12000, val_images=1000, input_size=32,
                           batch_size=128),
    "detection": dict(epochs=30, train_images=512, val_images=64, input_size=128, batch_size=16),
    "segmentation": dict(epochs=10, train_images=1000, val_images=200, input_size=64,
                         batch_size=8),
}


def task_of(arch: str) -> str:
    """The task an architecture key or model name belongs to: ``yolov8n(.yaml)`` -> detection,
    ``smp/unet/resnet18`` or ``unet/resnet18`` -> segmentation, ``timm/...``, ``torchvision/...``
    or a timm/torchvision name -> classification."""
    low = str(arch).lower()
    if canonical_arch(re.sub(r"\.ya?ml$", "", Path(low).name)):
        return "detection"
    if low.startswith("smp/"):
        return "segmentation"
    if low.startswith(("timm/", "torchvision/")):
        return "classification"
    from .tasks.classification import resolve_arch as classification_arch

    try:
        classification_arch(arch)
        return "classification"
    except ConfigError:
        pass
    if "/" in low or "-" in low:
        from .tasks.segmentation_models import resolve_arch as segmentation_arch

        try:
            segmentation_arch(arch)
            return "segmentation"
        except ConfigError:
            pass
    raise ConfigError(f"cannot tell the task of {arch!r}: use a timm/torchvision name "
                      f"(resnet18), a YOLO name (yolov8n, yolo11s) or smp/<arch>/<encoder> "
                      f"(smp/unet/resnet18), or pass --task")


def profile_name(task: str, key: str) -> str:
    """The file name of a profile, e.g. ``detection-yolov8n.json``."""
    return f"{task}-{key.replace('/', '-')}.json"


def finish_profile(task: str, key: str, measured: Path, out_dir: str | Path,
                   how: dict[str, Any]) -> Path:
    """Record how ``measured`` (a sensitivity file) was made — ``extra.how``, package versions,
    date — drop the weights' hash (the weights are not shipped), write it to ``out_dir`` and
    register it in ``out_dir/index.json``. Returns the profile's path."""
    from .profiles import _versions, register_profile
    from .store import read_record, write_record

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    record = read_record(measured)
    record.extra.update({"how": how, "versions": _versions(),
                         "date": datetime.date.today().isoformat()})
    record.model.pop("weights_sha256", None)
    name = profile_name(task, key)
    write_record(record, out_dir / name)
    register_profile(task, key, name, out_dir)
    return out_dir / name


def _command(key: str, task: str, s: dict[str, Any], ratios: tuple[float, ...]) -> str:
    cmd = (f"autoprune profiles build --arch {key} --task {task} --epochs {s['epochs']} "
           f"--train-images {s['train_images']} --val-images {s['val_images']} "
           f"--size {s['input_size']} --batch {s['batch_size']} --seed {s['seed']}")
    if ratios != tuple(DEFAULT_RATIOS):
        cmd += " --ratios " + ",".join(f"{r:g}" for r in ratios)
    return cmd


def _how(key: str, task: str, dataset: str, s: dict[str, Any], ratios: tuple[float, ...],
         **extra: Any) -> dict[str, Any]:
    return {"dataset": dataset, "train_images": s["train_images"], "val_images": s["val_images"],
            "input_size": s["input_size"], "epochs": s["epochs"], "batch_size": s["batch_size"],
            "seed": s["seed"], **extra, "command": _command(key, task, s, ratios)}


def _settings(task: str, given: dict[str, Any]) -> dict[str, Any]:
    s = dict(DEFAULTS[task])
    s.update({k: v for k, v in given.items() if v is not None})
    check_numbers(whole=True, low=1, **{k: s[k] for k in ("epochs", "train_images", "val_images",
                                                          "input_size", "batch_size")})
    return s


def build_classification_profile(arch: str, out_dir: str | Path, *, epochs: int | None = None,
                                 train_images: int | None = None, val_images: int | None = None,
                                 input_size: int | None = None, batch_size: int | None = None,
                                 ratios: Iterable[float] = DEFAULT_RATIOS,
                                 work_dir: str | Path | None = None, device: str = "auto",
                                 seed: int = 0, progress: bool = True) -> Path:
    """Train ``arch`` (timm/torchvision) on Fashion-MNIST, measure its sensitivities (top-1 on
    the first ``val_images`` test images) and write them as its profile in ``out_dir``."""
    from . import classification as cls
    from .tasks.classification import resolve_arch

    key, ratios = resolve_arch(arch), tuple(ratios)
    s = _settings("classification", dict(epochs=epochs, train_images=train_images,
                                         val_images=val_images, input_size=input_size,
                                         batch_size=batch_size, seed=seed))
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        base = cls.train(key, "fashion-mnist", epochs=s["epochs"], batch_size=s["batch_size"],
                         lr=0.05, input_size=s["input_size"], train_limit=s["train_images"],
                         eval_limit=s["val_images"], save_dir=Path(tmp) / "base", device=device,
                         seed=seed, progress=progress)
        measured = Path(tmp) / "sens.json"
        cls.analyze_sensitivity(base.baseline_path, "fashion-mnist", measured, ratios=ratios,
                                eval_limit=s["val_images"], device=device, progress=progress)
        how = _how(key, "classification", "Fashion-MNIST (Debian dataset-fashion-mnist), gray "
                   "repeated to 3 channels; validation: the first val_images test images", s,
                   ratios, optimizer="sgd", lr=0.05)
        return finish_profile("classification", key, measured, out_dir, how)


def build_detection_profile(arch: str, out_dir: str | Path, *, epochs: int | None = None,
                            train_images: int | None = None, val_images: int | None = None,
                            input_size: int | None = None, batch_size: int | None = None,
                            ratios: Iterable[float] = DEFAULT_RATIOS,
                            data: str | Path | None = None,
                            train_args: dict[str, Any] | None = None,
                            work_dir: str | Path | None = None, device: str = "auto",
                            seed: int = 0, progress: bool = True) -> Path:
    """Train a YOLO model (``yolov8n``... from its YAML) with Ultralytics on Fashion-MNIST scenes
    (``train_images`` / ``val_images`` canvases of ``input_size`` px with 1-4 garments, written
    by ``write_yolo_dataset`` with ``seed``), measure its mAP50-95 sensitivities on the val
    scenes and write them as its profile. ``data``: an existing data.yaml to use instead (then
    recorded as the dataset). ``train_args`` go to Ultralytics' trainer over the small-set
    defaults (AdamW, lr0 0.003, one warm-up epoch, a step per batch)."""
    from . import detection as det
    from .datasets.scenes import write_yolo_dataset
    from .tasks.detection import resolve_arch

    key, ratios = resolve_arch(arch), tuple(ratios)
    s = _settings("detection", dict(epochs=epochs, train_images=train_images,
                                    val_images=val_images, input_size=input_size,
                                    batch_size=batch_size, seed=seed))
    # Ultralytics' defaults suit large sets; a small set wants a step per batch and AdamW
    train_args = {"optimizer": "AdamW", "lr0": 0.003, "warmup_epochs": 1,
                  "nbs": s["batch_size"], **(train_args or {})}
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        if data is None:
            data_yaml = write_yolo_dataset(Path(tmp) / "scenes", train=s["train_images"],
                                           val=s["val_images"], size=s["input_size"], seed=seed)
            dataset = ("Fashion-MNIST scenes (autoprune.datasets.scenes.write_yolo_dataset: 1-4 "
                       "garments per canvas, 10 classes; train garments from the train split, "
                       "val from the test split)")
        else:
            data_yaml, dataset = Path(data), f"user data {Path(data).name}"
        base = det.train(f"{key}.yaml", data_yaml, epochs=s["epochs"], input_size=s["input_size"],
                         batch_size=s["batch_size"], save_dir=Path(tmp) / "base", device=device,
                         seed=seed, train_args=train_args, progress=progress)
        measured = Path(tmp) / "sens.json"
        det.analyze_sensitivity(base.baseline_path, data_yaml, measured, ratios=ratios,
                                batch_size=s["batch_size"], device=device,
                                eval_limit=s["val_images"], progress=progress)
        how = _how(key, "detection", dataset, s, ratios, train_args=train_args)
        return finish_profile("detection", key, measured, out_dir, how)


def build_segmentation_profile(arch: str, out_dir: str | Path, *, epochs: int | None = None,
                               train_images: int | None = None, val_images: int | None = None,
                               input_size: int | None = None, batch_size: int | None = None,
                               ratios: Iterable[float] = DEFAULT_RATIOS,
                               work_dir: str | Path | None = None, device: str = "auto",
                               seed: int = 0, progress: bool = True) -> Path:
    """Train an smp model (``smp/unet/resnet18``..., random encoder weights) on the in-memory
    Fashion-MNIST scenes ("fashion-scenes", 11 classes with the background), measure its mIoU
    sensitivities on ``val_images`` test scenes and write them as its profile."""
    from . import segmentation as seg
    from .tasks.segmentation_models import resolve_arch

    key, ratios = resolve_arch(arch), tuple(ratios)
    s = _settings("segmentation", dict(epochs=epochs, train_images=train_images,
                                       val_images=val_images, input_size=input_size,
                                       batch_size=batch_size, seed=seed))
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        base = seg.train(key, train_data="fashion-scenes", epochs=s["epochs"],
                         batch_size=s["batch_size"], input_size=s["input_size"],
                         train_limit=s["train_images"], eval_limit=s["val_images"],
                         save_dir=Path(tmp) / "base", device=device, seed=seed,
                         progress=progress)
        measured = Path(tmp) / "sens.json"
        seg.analyze_sensitivity(base.baseline_path, "fashion-scenes", measured, ratios=ratios,
                                batch_size=s["batch_size"], device=device,
                                eval_limit=s["val_images"], progress=progress)
        how = _how(key, "segmentation", "Fashion-MNIST scenes (autoprune 'fashion-scenes': "
                   "garments on textured backgrounds, masks 0 = background, class + 1; train "
                   "garments from the train split, val from the test split)", s, ratios,
                   optimizer="adamw", lr=1e-3, loss="dice + cross-entropy")
        return finish_profile("segmentation", key, measured, out_dir, how)


BUILDERS = {"classification": build_classification_profile,
            "detection": build_detection_profile,
            "segmentation": build_segmentation_profile}


def arch_key_of(arch: str, task: str) -> str:
    """The canonical key ``arch`` has in ``task`` (what the index lists)."""
    if task == "classification":
        from .tasks.classification import resolve_arch
    elif task == "detection":  # names only: Ultralytics is not imported
        from .tasks.yolo_names import resolve_arch
    elif task == "segmentation":
        from .tasks.segmentation_models import resolve_arch
    else:
        raise ConfigError(f"unknown task {task!r}: choose one of {', '.join(BUILDERS)}")
    return resolve_arch(arch)


def build_profile(arch: str, out_dir: str | Path, *, task: str | None = None,
                  **settings: Any) -> Path:
    """Build the profile of ``arch`` with the builder of its task (``task`` forces it); the
    settings (epochs, train_images, val_images, input_size, batch_size, ratios, device, seed,
    work_dir, progress) default per task (:data:`DEFAULTS`)."""
    task = task or task_of(arch)
    if task not in BUILDERS:
        raise ConfigError(f"unknown task {task!r}: choose one of {', '.join(BUILDERS)}")
    return BUILDERS[task](arch, out_dir, **settings)
