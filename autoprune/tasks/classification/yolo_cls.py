"""Ultralytics' YOLO classification models as classifiers of the classification task (their
names: :mod:`.yolo_names`). Ultralytics' ``ClassificationModel`` is the module, built from its
YAML or read from a ``.pt`` through Ultralytics' allow-list loader; its split blocks become the
detection package's split-free twins and its ``Classify`` head a :class:`ClassifyLogits`, which
returns the logits in eval mode too (Ultralytics' returns ``(softmax, logits)`` there; the
classification task's top-1, loss and distillation read logits). The state dict keeps
Ultralytics' names. Importing this module imports Ultralytics (offline)."""
from __future__ import annotations

import os

import torch
import torch.nn as nn

from ...errors import ConfigError
from ..detection import models as yolo  # first: Ultralytics imported offline
from .yolo_names import canonical, is_yolo_classifier, stem

from ultralytics.nn.modules.head import Classify  # noqa: E402
from ultralytics.nn.tasks import ClassificationModel  # noqa: E402


class ClassifyLogits(Classify):
    """Ultralytics' ``Classify`` head returning the logits in every mode (the numbers of its
    training output)."""

    def forward(self, x: list[torch.Tensor] | torch.Tensor) -> torch.Tensor:
        if isinstance(x, list):
            x = torch.cat(x, 1)
        return self.linear(self.drop(self.pool(self.conv(x)).flatten(1)))


def make_traceable(model: nn.Module) -> nn.Module:
    """A YOLO classification model with split-free twins (numerically identical) and the
    logits head, in place (idempotent); other models are returned as they are."""
    if not is_yolo_classifier(model):
        return model
    yolo.patch_model(model)
    for module in model.modules():
        if type(module) is Classify:
            module.__class__ = ClassifyLogits
    return model


def ignored_layers(model: nn.Module) -> list[nn.Module]:
    """The attention blocks of a YOLO classification model (C2PSA's: their heads are fixed
    views of the qkv conv); empty for other models."""
    return yolo.ignored_layers(model) if is_yolo_classifier(model) else []


def build(key: str, num_classes: int) -> nn.Module:
    """An untrained YOLO classification model ``key`` (``ultralytics/yolo11n-cls``) for
    ``num_classes`` classes, patched (:func:`make_traceable`)."""
    with yolo.quiet():
        model = ClassificationModel(f"{key.split('/', 1)[1]}.yaml", nc=num_classes,
                                    verbose=False)
    return make_traceable(model).eval()


def arch_of(model: nn.Module) -> str | None:
    """``ultralytics/<name>`` of a YOLO classification model, from the YAML it was built from
    (its file name, or the family plus its scale); None for other models."""
    if not is_yolo_classifier(model):
        return None
    cfg = getattr(model, "yaml", None) or {}
    found = stem(cfg.get("yaml_file") or "")
    if found.endswith("-cls") and cfg.get("scale") and not canonical(found):
        found = f"{found[:-len('-cls')]}{cfg['scale']}-cls"  # yolo11-cls.yaml + scale n
    return canonical(found)


def load_weights(name: str | os.PathLike,
                 num_classes: int | None) -> tuple[nn.Module, dict, bool]:
    """``(model, provenance, head kept)``: the YOLO classification model of the ``.pt`` file
    ``name`` (or of Ultralytics' published weights of that name, from its weights dir), read
    through Ultralytics' allow-list loader, its head refitted to ``num_classes`` (a new linear
    layer where the count differs, as Ultralytics' trainer does: then ``head kept`` is False),
    patched, trainable."""
    from ..detection.pretrained import load_pretrained

    model, provenance = load_pretrained(name)
    if not is_yolo_classifier(model):
        raise ConfigError(f"{name} holds a {type(model).__name__}, not a YOLO classification "
                          f"model: pass a -cls checkpoint (e.g. yolo11n-cls.pt)")
    kept = num_classes is None or head_classes(model) == num_classes
    if not kept:
        ClassificationModel.reshape_outputs(model, num_classes)
    model.float()
    for p in model.parameters():
        p.requires_grad_(True)
    return make_traceable(model).eval(), provenance.to_dict(), kept


def head_classes(model: nn.Module) -> int | None:
    """The class count of a YOLO classification model's head."""
    heads = [m for m in model.modules() if isinstance(m, Classify)]
    return heads[-1].linear.out_features if heads else None


__all__ = ["ClassifyLogits", "arch_of", "build", "head_classes", "ignored_layers",
           "load_weights", "make_traceable"]
