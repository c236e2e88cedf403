"""The Ultralytics YOLO detection models autoprune prunes, by name (no Ultralytics import here:
the CLI and profile building read names without loading the model libraries)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError

# every Ultralytics YOLO detection family autoprune prunes: family -> its scales
YOLO_FAMILIES = {"yolov3-tiny": "", "yolov5": "nsmlx", "yolov6": "nsmlx", "yolov8": "nsmlx",
                 "yolov9": "tsm", "yolov10": "nsmblx", "yolo11": "nsmlx", "yolo12": "nsmlx",
                 "yolo26": "nsmlx"}
_U_FAMILIES = ("yolov3-tiny", "yolov5")  # Ultralytics' anchor-free remakes: yolov5nu.pt
FAMILIES = ("yolov3-tiny, yolov5n/s/m/l/x, yolov6n/s/m/l/x, yolov8n/s/m/l/x, yolov9t/s/m, "
            "yolov10n/s/m/b/l/x, yolo11n/s/m/l/x, yolo12n/s/m/l/x, yolo26n/s/m/l/x")
# families and variants refused by name, with the reason
_REFUSED_FAMILIES = {
    "yolov9c": "its ADown blocks split a layer's input in two, which the pruning graph cannot "
               "follow yet; prune yolov9t/s/m instead",
    "yolov9e": "its ADown and CBLinear blocks split layers' outputs, which the pruning graph "
               "cannot follow yet; prune yolov9t/s/m instead",
}
# Ultralytics variants no registered task prunes, and what they are (a name another YOLO task
# prunes, such as a head variant, is found by asking the registry: _other_task_of)
_OTHER_VARIANTS = {"-cls": "classification", "-world": "open vocabulary", "-rtdetr": "RT-DETR",
                   "-p2": "P2 head", "-p6": "P6 head", "-ghost": "ghost convs"}
def canonical_arch(stem: str) -> str | None:
    """The key (``yolov8n``, ``yolov5nu``, ``yolov9t``...) of a model stem, None when it is not
    one of :data:`YOLO_FAMILIES` (``yolov5n`` and ``yolov5nu`` name the same model)."""
    for family, scales in YOLO_FAMILIES.items():
        if not stem.startswith(family):
            continue
        rest = stem[len(family):]
        u = family in _U_FAMILIES
        scale = rest[:-1] if u and rest.endswith("u") else rest
        if (scale and len(scale) == 1 and scale in scales) or (not scales and not scale):
            return family + scale + ("u" if u else "")
    return None


def resolve_arch(name: str) -> str:
    """Canonical key (``yolov8n``, ``yolo26s``...) of a model name such as ``"yolov8n.yaml"``;
    a ConfigError that says why for a family or variant autoprune does not prune."""
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
    """The lower-case stem of a model name or file: ``"YOLO11n-Pose.pt"`` -> ``"yolo11n-pose"``."""
    return re.sub(r"\.(ya?ml|pt)$", "", Path(str(name)).name.lower())


@dataclass(frozen=True)
class HeadVariant:
    """The models of a task whose YOLO head replaces detection's, named with a suffix
    (``yolo11n-seg``): their keys, and one-line errors for names of other models."""

    suffix: str          # "-seg"
    package: str         # "instance_segmentation": autoprune.<package> prunes them
    what: str            # "an instance segmentation model"
    detection_note: str = ""  # " (upright boxes)": what a plain detection model lacks

    @property
    def families(self) -> str:
        """The names this task prunes, for messages: ``"yolov8n/s/m/l/x-seg, ..."``."""
        return ", ".join(f"{family}n/s/m/l/x{self.suffix}" for family in VARIANT_FAMILIES)

    def canonical(self, stem: str) -> str | None:
        """The key (``yolov8n-seg``...) of a model stem, None when it is not one of this task's
        models of :data:`VARIANT_FAMILIES`."""
        if not stem.endswith(self.suffix):
            return None
        key = canonical_arch(stem[:-len(self.suffix)])
        if key and key.startswith(VARIANT_FAMILIES) and key[-1] in "nsmlx":
            return f"{key}{self.suffix}"
        return None

    def resolve(self, name: str) -> str:
        """Canonical key of a model name such as ``"yolo11n-seg.yaml"``; a one-line ConfigError
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
        if stem.startswith("yolo"):  # another family (yolo12n-seg) or task (yolov8n-pose)
            raise ConfigError(f"{name!r} is not {self.what} autoprune prunes: use one of "
                              f"{self.families} (e.g. {example})")
        raise ConfigError(f"unknown model name {name!r}: use one of {self.families} (e.g. "
                          f"{example}), a .pt checkpoint or a YOLO object")
