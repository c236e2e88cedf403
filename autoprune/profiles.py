"""DEFAULT sensitivity profiles bundled with autoprune (``sensitivities_file="DEFAULT"``).

Profiles live in ``pretrained_sensitivities/`` (repo root, shipped in the wheel as the package
``autoprune.pretrained_sensitivities``): one JSON sensitivity file per architecture and an
``index.json`` mapping ``{task: {arch_key: file name}}``.
"""
from __future__ import annotations

import json
from pathlib import Path

from .errors import ConfigError

DEFAULT = "DEFAULT"


def profile_dir() -> Path:
    """The folder holding the bundled profiles (installed package first, then the source tree)."""
    try:
        from importlib.resources import files

        path = Path(str(files("autoprune.pretrained_sensitivities")))
        if (path / "index.json").is_file():
            return path
    except (ImportError, ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parent.parent / "pretrained_sensitivities"


def available_profiles() -> dict[str, dict[str, str]]:
    """``{task: {arch_key: file name}}`` of the bundled profiles."""
    index = profile_dir() / "index.json"
    if not index.is_file():
        return {}
    return json.loads(index.read_text()).get("profiles", {})


def find_profile(task: str, arch_key: str) -> Path:
    """Path of the bundled profile for ``arch_key``, or a ConfigError listing what exists."""
    profiles = available_profiles().get(task, {})
    if arch_key in profiles:
        return profile_dir() / profiles[arch_key]
    have = ", ".join(sorted(profiles)) or "none yet"
    raise ConfigError(f"no DEFAULT sensitivity profile for {arch_key!r} ({task}); bundled: "
                      f"{have}. Pass sensitivities_file=<new path> to measure your own")


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("autoprune", "torch", "torchvision", "torch-pruning", "timm", "ultralytics",
                "segmentation-models-pytorch"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def register_profile(task: str, arch_key: str, file_name: str, out_dir: Path) -> Path:
    """Add ``arch_key -> file_name`` to ``out_dir/index.json`` (written atomically)."""
    from .store import _now  # noqa: PLC0415 - the store's timestamp format

    index_path = out_dir / "index.json"
    index = json.loads(index_path.read_text()) if index_path.is_file() else {}
    index.setdefault("format", "autoprune-profile-index")
    index.setdefault("profiles", {}).setdefault(task, {})[arch_key] = file_name
    index["updated"] = _now()
    tmp = index_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(index, indent=1, sort_keys=True))
    tmp.replace(index_path)
    return index_path


def build_classification_profile(arch: str, out_dir: str | Path, *, epochs: int = 3,
                                 train_images: int = 12000, val_images: int = 1000,
                                 input_size: int = 32, work_dir: str | Path | None = None,
                                 device: str = "auto", seed: int = 0) -> Path:
    """Train ``arch`` on Fashion-MNIST, measure its sensitivities and bundle them as its profile.

    The file records how it was made (data, input size, epochs, metric, baseline, criterion,
    ratios, package versions, date) and is added to ``out_dir/index.json``.
    """
    import datetime
    import tempfile

    from . import classification as cls
    from .store import read_record, write_record
    from .tasks.classification import resolve_arch

    key = resolve_arch(arch)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = "classification-" + key.replace("/", "-") + ".json"
    with tempfile.TemporaryDirectory(dir=work_dir) as tmp:
        base = cls.train(key, "fashion-mnist", epochs=epochs, batch_size=128, lr=0.05,
                         input_size=input_size, train_limit=train_images,
                         eval_limit=val_images, save_dir=Path(tmp) / "base", device=device,
                         seed=seed)
        target = Path(tmp) / name
        cls.analyze_sensitivity(base.baseline_path, "fashion-mnist", target,
                                eval_limit=val_images, device=device)
        record = read_record(target)
    record.extra.update({
        "how": {"dataset": "Fashion-MNIST (Debian dataset-fashion-mnist), gray repeated to 3 "
                           "channels", "train_images": train_images, "val_images": val_images,
                "input_size": input_size, "epochs": epochs, "seed": seed,
                "command": f"autoprune profiles build --arch {arch} --epochs {epochs} "
                           f"--train-images {train_images} --val-images {val_images} "
                           f"--size {input_size}"},
        "versions": _versions(),
        "date": datetime.date.today().isoformat()})
    record.model.pop("weights_sha256", None)  # the weights are not shipped
    write_record(record, out_dir / name)
    register_profile("classification", key, name, out_dir)
    return out_dir / name
