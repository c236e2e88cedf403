"""The RT-DETR models autoprune prunes, by name (``rtdetr-l``, ``rtdetr-x``: Ultralytics' YAMLs
and ``.pt`` weights; no Ultralytics import here, so the CLI and profile building read names
without loading the model libraries)."""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError
from ..detection.names import model_stem

MODELS = ("rtdetr-l", "rtdetr-x")  # HGNetv2 backbones; the ResNet ones are refused (_OTHERS)
_OTHERS = {"rtdetr-resnet50": "a ResNet backbone", "rtdetr-resnet101": "a ResNet backbone"}


@dataclass(frozen=True)
class RTDETRNames:
    """RT-DETR's model names in the form the YOLO family's adapters read (as a
    :class:`~..detection.names.HeadVariant`): keys, and one-line errors for other names."""

    suffix: str = ""  # the names carry no task suffix
    families: str = ", ".join(MODELS)

    def canonical(self, stem: str) -> str | None:
        """The key (``rtdetr-l``) of a model stem, None when it is not one of :data:`MODELS`."""
        stem = model_stem(stem)
        return stem if stem in MODELS else None

    def resolve(self, name: str) -> str:
        """The key of a model name such as ``"rtdetr-l.yaml"`` or ``"rtdetr-x.pt"``; a one-line
        ConfigError naming the models otherwise."""
        key = self.canonical(str(name))
        if key:
            return key
        stem = model_stem(name)
        if stem in _OTHERS:
            raise ConfigError(f"{name!r} is RT-DETR with {_OTHERS[stem]}, which autoprune does not "
                              f"prune yet: use one of {self.families}")
        if stem.startswith("yolo") and "-rtdetr" in stem:
            raise ConfigError(f"{name!r} puts an RT-DETR decoder on a YOLO backbone, which "
                              f"autoprune does not prune yet: use one of {self.families}")
        raise ConfigError(f"unknown model name {name!r}: use one of {self.families} (e.g. "
                          f"'rtdetr-l.yaml'), a .pt checkpoint or an RTDETR object")


NAMES = RTDETRNames()
resolve_arch = NAMES.resolve  # the key of a model name, or a one-line ConfigError (the registry's)

__all__ = ["MODELS", "NAMES", "RTDETRNames", "resolve_arch"]
