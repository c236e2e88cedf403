"""DEFAULT sensitivity profiles bundled with autoprune (``sensitivities_file="DEFAULT"``).

Profiles live in ``pretrained_sensitivities/`` (repo root, shipped in the wheel as the package
``autoprune.pretrained_sensitivities``): one JSON sensitivity file per architecture and an
``index.json`` mapping ``{task: {arch_key: file name}}``. ``autoprune profiles build`` makes them
(:mod:`autoprune.profiles.build`); ``$AUTOPRUNE_PROFILE_DIR`` points DEFAULT at another folder.
"""
from __future__ import annotations

import json
import os
from importlib.metadata import PackageNotFoundError, version
from importlib.resources import files
from pathlib import Path
from typing import Any

from ..engine.files import write_text_atomic
from ..engine.store import now, read_record
from ..errors import ConfigError, SensitivityFileError

DEFAULT = "DEFAULT"
PROFILE_DIR_ENV = "AUTOPRUNE_PROFILE_DIR"


def profile_dir() -> Path:
    """The folder holding the DEFAULT profiles: ``$AUTOPRUNE_PROFILE_DIR`` when set (profiles
    you built with ``autoprune profiles build --out``), else the bundled ones (installed package
    first, then the source tree)."""
    if os.environ.get(PROFILE_DIR_ENV):
        return Path(os.environ[PROFILE_DIR_ENV])
    try:
        path = Path(str(files("autoprune.pretrained_sensitivities")))
        if (path / "index.json").is_file():
            return path
    except (ImportError, ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parents[2] / "pretrained_sensitivities"


def available_profiles() -> dict[str, dict[str, str]]:
    """``{task: {arch_key: file name}}`` of the bundled profiles."""
    folder, own = profile_dir(), os.environ.get(PROFILE_DIR_ENV)
    if own and not folder.is_dir():
        raise ConfigError(f"{PROFILE_DIR_ENV}={own} is not a folder: point it at the --out folder "
                          f"of autoprune profiles build, or unset it to use the bundled profiles")
    fix = (f"delete it and build the profiles again with autoprune profiles build --out "
           f"{folder}, or unset {PROFILE_DIR_ENV}") if own else "reinstall autoprune"
    return profiles_in(folder, fix)


def profiles_in(folder: Path, fix: str = "restore a copy, or delete it and build the profiles "
                "again") -> dict[str, dict[str, str]]:
    """``{task: {arch_key: file name}}`` listed in ``folder/index.json`` ({} without an index);
    a damaged index is a one-line SensitivityFileError ending in ``fix``."""
    index = Path(folder) / "index.json"
    return _read_index(index, fix).get("profiles", {}) if index.is_file() else {}


def _read_index(path: Path, fix: str) -> dict:
    """The content of a profile index, or a one-line SensitivityFileError ending in ``fix``."""
    try:
        index = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        why = f"{e.msg}: line {e.lineno} column {e.colno}" \
            if isinstance(e, json.JSONDecodeError) else "binary content" \
            if isinstance(e, UnicodeDecodeError) else "nested too deeply"
        raise SensitivityFileError(f"{path} is not a valid profile index (corrupt or truncated: "
                                   f"{why}): {fix}") from None
    profiles = index.get("profiles", {}) if isinstance(index, dict) else None
    if not isinstance(profiles, dict) or not all(
            isinstance(archs, dict) and all(isinstance(n, str) for n in archs.values())
            for archs in profiles.values()):
        raise SensitivityFileError(f"{path} is not a valid profile index (no {{task: {{arch: "
                                   f"file}}}} map under 'profiles'): {fix}")
    return index


def find_profile(task: str, arch_key: str) -> Path:
    """Path of the bundled profile for ``arch_key``, or a ConfigError listing what exists."""
    profiles = available_profiles().get(task, {})
    if arch_key in profiles:
        return profile_dir() / profiles[arch_key]
    have = ", ".join(sorted(profiles)) or "none yet"
    raise ConfigError(f"no DEFAULT sensitivity profile for {arch_key!r} ({task}); bundled: "
                      f"{have}. Pass sensitivities_file=<new path> to measure your own")


def versions() -> dict[str, str]:
    """The installed versions of autoprune and the libraries a profile depends on."""
    out = {}
    for pkg in ("autoprune", "torch", "torchvision", "torch-pruning", "timm", "ultralytics",
                "segmentation-models-pytorch"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def register_profile(task: str, arch_key: str, file_name: str, out_dir: Path) -> Path:
    """Add ``arch_key -> file_name`` to ``out_dir/index.json`` (written atomically), with the
    profile's provenance under ``about`` (:func:`provenance_of`)."""
    index_path = out_dir / "index.json"
    index = _read_index(index_path, "restore a copy, or delete it and build the profiles "
                        "again") if index_path.is_file() else {}
    index.setdefault("format", "autoprune-profile-index")
    index.setdefault("profiles", {}).setdefault(task, {})[arch_key] = file_name
    if (out_dir / file_name).is_file():
        index.setdefault("about", {})[file_name] = provenance_of(out_dir / file_name)
    index["updated"] = now()
    return write_text_atomic(index_path, json.dumps(index, indent=1, sort_keys=True))


def provenance_of(profile: Path) -> dict[str, Any]:
    """How a profile was made, in short: its data set, input size, metric (and the base model's
    value) and start (from scratch, or which pretrained weights)."""
    record = read_record(profile)
    how = record.extra.get("how") or {}
    return {"data": how.get("dataset"), "input_size": how.get("input_size"),
            "metric": record.metric.get("name"), "baseline": record.metric.get("baseline"),
            "start": how.get("start") or "from scratch", "date": record.extra.get("date")}
