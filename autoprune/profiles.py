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
