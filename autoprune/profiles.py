"""DEFAULT sensitivity profiles bundled with autoprune (``sensitivities_file="DEFAULT"``).

Profiles live in ``pretrained_sensitivities/`` (repo root, shipped in the wheel as the package
``autoprune.pretrained_sensitivities``): one JSON sensitivity file per architecture and an
``index.json`` mapping ``{task: {arch_key: file name}}``. ``autoprune profiles build`` makes them
(:mod:`autoprune.profile_build`); ``$AUTOPRUNE_PROFILE_DIR`` points DEFAULT at another folder.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .errors import ConfigError

DEFAULT = "DEFAULT"
PROFILE_DIR_ENV = "AUTOPRUNE_PROFILE_DIR"


def profile_dir() -> Path:
    """The folder holding the DEFAULT profiles: ``$AUTOPRUNE_PROFILE_DIR`` when set (profiles
    you built with ``autoprune profiles build --out``), else the bundled ones (installed package
    first, then the source tree)."""
    if os.environ.get(PROFILE_DIR_ENV):
        return Path(os.environ[PROFILE_DIR_ENV])
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


# the builders (they train and measure) live in profile_build
from .profile_build import (build_classification_profile, build_detection_profile,  # noqa: E402
                            build_profile, build_segmentation_profile)
