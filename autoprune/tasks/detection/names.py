"""The Ultralytics YOLO detection models autoprune prunes, by name (no Ultralytics import here:
the CLI and profile building read names without loading the model libraries)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError

# every Ultralytics YOLO detection family autoprune prunes: family -> its scales
YOLO_FAMILIES = {"yolov3-tiny": "", "yolov5": "nsmlx", "yolov6": "nsmlx", "yolov8": "nsmlx",
                 "yolov9": "tsmce", "yolov10": "nsmblx", "yolo11": "nsmlx", "yolo12": "nsmlx",
                 "yolo26": "nsmlx"}
_U_FAMILIES = ("yolov3-tiny", "yolov5")  # Ultralytics' anchor-free remakes: yolov5nu.pt
# heads with an extra output ("-p2": a stride-4 output for small objects; "-p6": a stride-64 one
# for large inputs): suffix -> the families whose detection YAMLs Ultralytics ships with it (a
# sub-task declares its own on its HeadVariant)
HEAD_SIZES = {"-p2": ("yolov8", "yolo26"), "-p6": ("yolov8", "yolo26")}
FAMILIES = ("yolov3-tiny, yolov5n/s/m/l/x, yolov6n/s/m/l/x, yolov8n/s/m/l/x, yolov9t/s/m/c/e, "
            "yolov10n/s/m/b/l/x, yolo11n/s/m/l/x, yolo12n/s/m/l/x, yolo26n/s/m/l/x, and the P2 / "
            "P6 heads of yolov8 and yolo26 (yolov8s-p2, yolo26n-p6...)")
# families and variants refused by name, with the reason (none today: yolov9c / yolov9e prune
# since their ADown and CBLinear blocks have twins, see .yolov9)
_REFUSED_FAMILIES: dict[str, str] = {}
# Ultralytics variants no registered task prunes, and what they are (a name another YOLO task
# prunes, such as a head variant, is found by asking the registry: _other_task_of)
_OTHER_VARIANTS = {"-cls": "classification", "-world": "open vocabulary",
                   "-rtdetr": "a YOLOv8 backbone under an RT-DETR decoder; autoprune.rtdetr "
                              "prunes rtdetr-l / rtdetr-x",
                   "-ghost": "ghost convs"}


def split_head_size(stem: str) -> tuple[str, str]:
    """``(stem without its head-size suffix, the suffix)``: ``"yolov8s-p2"`` -> ``("yolov8s",
    "-p2")``; the suffix is empty for a model without one."""
    for suffix in HEAD_SIZES:
        if stem.endswith(suffix):
            return stem[:-len(suffix)], suffix
    return stem, ""


def has_head_size(key: str, size: str, sizes: dict[str, tuple[str, ...]] | None = None) -> bool:
    """True when ``size`` (``-p2``, ``-p6``; empty: none) is one of the heads ``sizes`` (size
    -> families; detection's :data:`HEAD_SIZES` by default) offers the model ``key``
    (``yolov8s``)."""
    sizes = HEAD_SIZES if sizes is None else sizes
    return not size or (key[-1] in "nsmlx" and key.startswith(sizes.get(size, ())))


def _plain_arch(stem: str) -> str | None:
    for family, scales in YOLO_FAMILIES.items():
        if not stem.startswith(family):
            continue
        rest = stem[len(family):]
        u = family in _U_FAMILIES
        scale = rest[:-1] if u and rest.endswith("u") else rest
        if (scale and len(scale) == 1 and scale in scales) or (not scales and not scale):
            return family + scale + ("u" if u else "")
    return None


def canonical_arch(stem: str) -> str | None:
    """The key (``yolov8n``, ``yolov5nu``, ``yolov9c``, ``yolov8s-p2``...) of a model stem, None
    when it is not one of :data:`YOLO_FAMILIES` or of their :data:`HEAD_SIZES` variants
    (``yolov5n`` and ``yolov5nu`` name the same model)."""
    base, size = split_head_size(stem)
    key = _plain_arch(base)
    if key is None or not has_head_size(key, size):
        return None
    return key + size


def resolve_arch(name: str) -> str:
    """Canonical key (``yolov8n``, ``yolo26s``, ``yolov8s-p2``...) of a model name such as
    ``"yolov8n.yaml"``; a ConfigError that says why for a family or variant autoprune does not
    prune."""
    stem = model_stem(name)
    key = canonical_arch(stem)
    if key:
        return key
    for family, why in _REFUSED_FAMILIES.items():
        if stem.startswith(family):
            raise ConfigError(f"{name!r}: {family} is not supported: {why}")
    owner = _other_task_of(name)
    if owner is not None:
        raise ConfigError(f"{name!r} is not a plain detection model ({owner.replace('_', ' ')}):"
                          f" autoprune.detection prunes {FAMILIES} (autoprune.{owner} prunes "
                          f"it)")
    base, size = split_head_size(stem)
    if size and _plain_arch(base):
        raise ConfigError(f"{name!r}: Ultralytics ships {size[1:].upper()} heads only for "
                          f"{', '.join(HEAD_SIZES[size])} (n/s/m/l/x): e.g. "
                          f"'yolov8s{size}.yaml'")
    for suffix, what in _OTHER_VARIANTS.items():
        if suffix in stem:
            raise ConfigError(f"{name!r} is not a plain detection model ({what}): "
                              f"autoprune.detection prunes {FAMILIES}")
    raise ConfigError(f"unknown model name {name!r}: use one of {FAMILIES} (e.g. 'yolo26n.yaml'), "
                      f"a .pt checkpoint or a YOLO object")


def _other_task_of(name: str) -> str | None:
    """The registered task (other than detection) whose names include ``name``, if any."""
    from ...flow.registry import TASKS

    for task in TASKS.values():
        if task.name == "detection":
            continue
        try:
            task.arch_key(name)
        except ConfigError:
            continue
        return task.name
    return None


VARIANT_FAMILIES = ("yolov8", "yolo11", "yolo26")  # Ultralytics ships their head variants' YAMLs


def model_stem(name: str | Path) -> str:
    """The lower-case stem of a model name or file: ``"YOLO11n-P6.pt"`` -> ``"yolo11n-p6"``."""
    return re.sub(r"\.(ya?ml|pt)$", "", Path(str(name)).name.lower())


@dataclass(frozen=True)
class HeadVariant:
    """The models of a task whose YOLO head replaces detection's, named with a suffix
    (``yolo11n<suffix>``): their keys, and one-line errors for names of other models."""

    suffix: str          # what its models' names end with: yolo11n<suffix>
    package: str         # autoprune.<package> prunes them
    what: str            # what they are, in words: "a ... model"
    detection_note: str = ""  # " (upright boxes)": what a plain detection model lacks
    # the extra-output heads whose YAMLs Ultralytics ships for the task: (("-p6", ("yolov8",)),)
    # for yolov8n-<task>-p6 (size, families), as HEAD_SIZES for detection
    head_sizes: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def families(self) -> str:
        """The names this task prunes, for messages: ``"yolov8n/s/m/l/x<suffix>, ..."`` (and
        its extra-output heads: ``yolov8n/s/m/l/x<suffix>-p6``)."""
        sized = [f"{family}n/s/m/l/x{self.suffix}{size}" for size, families in self.head_sizes
                 for family in families]
        return ", ".join([f"{family}n/s/m/l/x{self.suffix}" for family in VARIANT_FAMILIES]
                         + sized)

    def canonical(self, stem: str) -> str | None:
        """The key (``yolov8n<suffix>``, ``yolov8s<suffix>-p6``...) of a model stem, None when
        it is not one of this task's models of :data:`VARIANT_FAMILIES` (or of its
        ``head_sizes``)."""
        base, size = split_head_size(stem)
        if not base.endswith(self.suffix):
            return None
        key = _plain_arch(base[:-len(self.suffix)])
        if key and key.startswith(VARIANT_FAMILIES) and key[-1] in "nsmlx" \
                and has_head_size(key, size, dict(self.head_sizes)):
            return f"{key}{self.suffix}{size}"
        return None

    def resolve(self, name: str) -> str:
        """Canonical key of a model name such as ``"yolo11n<suffix>.yaml"``; a one-line ConfigError
        that names the supported models otherwise."""
        stem = model_stem(name)
        key = self.canonical(stem)
        if key:
            return key
        example = f"'yolo11n{self.suffix}.yaml'"
        if canonical_arch(stem):
            raise ConfigError(f"{name!r} is a detection model{self.detection_note}: "
                              f"autoprune.{self.package} prunes {self.families} (or use "
                              f"autoprune.detection)")
        if stem.startswith("yolo"):  # another family (yolo12n<suffix>) or another task
            raise ConfigError(f"{name!r} is not {self.what} autoprune prunes: use one of "
                              f"{self.families} (e.g. {example})")
        raise ConfigError(f"unknown model name {name!r}: use one of {self.families} (e.g. "
                          f"{example}), a .pt checkpoint or a YOLO object")
