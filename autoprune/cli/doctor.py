"""The installed stack against the tested one (``autoprune/constraints.txt``).

``autoprune doctor`` prints both side by side; ``autoprune --version`` names the main packages and
warns when one differs. Nothing here imports torch or a model library: versions are read from the
installed distributions' metadata, so the check is fast and works when an import would fail.
"""
from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from importlib import metadata
from importlib.resources import files

# what a user is shown first (the full tested set is checked with --all / --strict)
MAIN_PACKAGES = ("torch", "torchvision", "torch-pruning", "timm", "ultralytics",
                 "segmentation-models-pytorch", "numpy", "opencv-python", "onnx", "pyyaml",
                 "matplotlib", "tqdm", "pillow")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def tested_versions(text: str | None = None) -> dict[str, str]:
    """``{package: version}`` of the tested set (the ``name==version`` lines of constraints.txt)."""
    if text is None:
        text = files("autoprune").joinpath("constraints.txt").read_text()
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[_canonical(name.split("[")[0].strip())] = version.split(";")[0].strip()
    return pins


def installed_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class VersionCheck:
    name: str
    tested: str | None
    installed: str | None

    @property
    def differs(self) -> bool:
        return self.tested is not None and self.installed != self.tested


def check_stack(names: tuple[str, ...] | None = None,
                tested: dict[str, str] | None = None) -> list[VersionCheck]:
    """One :class:`VersionCheck` per package: ``names`` (default: every tested package)."""
    tested = tested_versions() if tested is None else tested
    names = tuple(tested) if names is None else names
    return [VersionCheck(n, tested.get(_canonical(n)), installed_version(n)) for n in names]


def difference_warning(checks: list[VersionCheck]) -> str | None:
    """One line naming the packages that differ from the tested set, and the fix (None if none)."""
    bad = [c for c in checks if c.differs]
    if not bad:
        return None
    shown = ", ".join(f"{c.name} {c.installed or 'missing'} (tested {c.tested})" for c in bad[:6])
    more = f" and {len(bad) - 6} more" if len(bad) > 6 else ""
    return (f"warning: {shown}{more} differ from the tested set: results may differ; "
            f"run scripts/setup.sh, or pip install -c <autoprune>/constraints.txt autoprune")


def version_text(autoprune_version: str, checks: list[VersionCheck]) -> str:
    """What ``autoprune --version`` prints: autoprune's version and the first six of ``checks``
    (those of :data:`MAIN_PACKAGES`)."""
    stack = ", ".join(f"{c.name} {c.installed or 'missing'}" for c in checks[:6])
    return f"autoprune {autoprune_version} ({stack}; Python {platform.python_version()})"


def doctor_lines(show_all: bool = False) -> tuple[list[str], list[VersionCheck]]:
    """The table ``autoprune doctor`` prints, and the checks that differ from the tested set."""
    everything = check_stack()
    by_name = {c.name: c for c in everything}
    shown = everything if show_all else [by_name.get(n) or VersionCheck(n, None,
                                                                        installed_version(n))
                                         for n in MAIN_PACKAGES]
    width = max(len(c.name) for c in shown) + 2
    lines = [f"Python {platform.python_version()} on {platform.machine()} ({platform.system()})",
             "package".ljust(width) + "installed".ljust(16) + "tested"]
    for c in shown:
        mark = "  <- differs" if c.differs else ""
        lines.append(c.name.ljust(width) + (c.installed or "missing").ljust(16)
                     + (c.tested or "-") + mark)
    return lines, [c for c in everything if c.differs]
