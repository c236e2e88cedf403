"""Intersection-over-union for semantic segmentation: a confusion matrix over all evaluation
pixels, per-class IoU and their mean (mIoU).

A class that is neither in the ground truth nor predicted has no IoU (0/0): it is left out of the
mean and of the per-class figures, as in mmsegmentation. Pixels equal to ``ignore_index`` count
nowhere.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import torch
import torch.nn as nn

from ...errors import ConfigError


def confusion_matrix(pred: torch.Tensor, target: torch.Tensor, num_classes: int,
                     ignore_index: int | None = 255) -> torch.Tensor:
    """``(num_classes, num_classes)`` counts, rows = ground truth, columns = prediction."""
    valid = (target != ignore_index if ignore_index is not None
             else torch.ones_like(target, dtype=torch.bool))
    t, p = target[valid].long(), pred[valid].long()
    return torch.bincount(t * num_classes + p, minlength=num_classes ** 2) \
        .reshape(num_classes, num_classes).cpu()


def iou_from_confusion(conf: torch.Tensor) -> torch.Tensor:
    """Per-class IoU (NaN where the class is neither present nor predicted)."""
    conf = conf.double()
    inter = conf.diag()
    union = conf.sum(0) + conf.sum(1) - inter
    return torch.where(union > 0, inter / union.clamp(min=1), torch.full_like(inter, float("nan")))


def segmentation_metrics(conf: torch.Tensor, class_keys: Sequence[str]) -> dict[str, float]:
    """``{"miou": ..., "iou_<class>": ...}`` (JSON-friendly floats only)."""
    iou = iou_from_confusion(conf)
    defined = ~torch.isnan(iou)
    if not defined.any():
        raise ConfigError("evaluation data has no labelled pixel (all ignore_index?): pass masks "
                         "with class indices")
    out = {"miou": float(iou[defined].mean())}
    out.update({f"iou_{k}": float(v) for k, v, d in zip(class_keys, iou, defined) if d})
    return out


@torch.no_grad()
def evaluate_iou(model: nn.Module, batches: Iterable, *, device: torch.device, num_classes: int,
                 class_keys: Sequence[str], ignore_index: int | None = 255) -> dict[str, float]:
    """mIoU and per-class IoU of ``model`` over ``batches`` of ``(images, masks)``."""
    was_training = model.training
    model.to(device).eval()
    conf = torch.zeros(num_classes, num_classes, dtype=torch.long)
    try:
        for images, masks in batches:
            logits = model(images.to(device))
            if logits.shape[-2:] != masks.shape[-2:]:
                raise ConfigError(f"the model outputs {tuple(logits.shape[-2:])} masks for "
                                 f"{tuple(masks.shape[-2:])} labels: use inputs whose sides are "
                                 f"divisible by 32")
            conf += confusion_matrix(logits.argmax(1), masks.to(device), num_classes, ignore_index)
    finally:
        model.train(was_training)
    return segmentation_metrics(conf, class_keys)
