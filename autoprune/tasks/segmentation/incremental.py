"""mIoU that reports batch by batch with sure bounds, for the adaptive analysis's early stop
(:mod:`autoprune.engine.incremental`).

mIoU is not a mean over images (one confusion matrix over every pixel, then a mean over classes),
so no per-image score exists; the bound is deterministic instead. Before the first batch the
ground truth of every batch is counted per class (the masks alone, no model). After ``n``
batches, with ``g_c`` labelled pixels of class ``c`` and ``M`` labelled pixels in all still
unseen: class ``c``'s final IoU is at most ``(TP + g_c) / (TP + FP + FN + g_c)`` (every unseen
``c`` pixel found, no other pixel called ``c``) and at least ``TP / (TP + FP + FN + M)`` (none
found, every unseen pixel called ``c``). The mean of the upper ends over the classes surely in
the final mean (seen, or with unseen pixels) bounds mIoU from above; from below, their lower ends
summed over that count plus the classes that could still enter the mean with IoU 0 (predicted on
an unseen pixel). Both ends are reached only by impossible joint completions, so the bound is
loose but sound: a decision taken from it is the full evaluation's decision. It tightens as the
unseen share shrinks, so it decides early mostly the points whose mIoU fell far below the
threshold."""
from __future__ import annotations

from typing import Any, Iterator

import torch
import torch.nn as nn

from ...engine.data import CachedBatches, make_loader
from ...engine.incremental import Step
from .metrics import confusion_matrix, iou_from_confusion, segmentation_metrics


def miou_bounds(conf: torch.Tensor, unseen: torch.Tensor) -> tuple[float, float]:
    """``(low, high)`` of the final mIoU given the confusion matrix ``conf`` so far and
    ``unseen``, each class's labelled pixels not seen yet (see the module docstring)."""
    conf, unseen = conf.double(), unseen.double()
    tp = conf.diag()
    union = conf.sum(0) + conf.sum(1) - tp
    rest = float(unseen.sum())
    sure = (union > 0) | (unseen > 0)
    maybe = ~sure & (rest > 0)
    if not sure.any():
        return 0.0, 1.0
    high = ((tp + unseen) / (union + unseen).clamp(min=1e-12))[sure]
    low = (tp / (union + rest).clamp(min=1e-12))[sure]
    return float(low.sum() / (sure.sum() + maybe.sum())), float(high.mean())


def seen_miou(conf: torch.Tensor) -> float | None:
    """The mIoU of the pixels counted in ``conf`` alone (None before any labelled pixel)."""
    iou = iou_from_confusion(conf)
    defined = ~torch.isnan(iou)
    return float(iou[defined].mean()) if defined.any() else None


class BoundedMIoU:
    """``incremental(model)``: per batch of the adapter's evaluation data, sure bounds of the
    whole evaluation's mIoU (the same batches and number as ``adapter.evaluate``), the mIoU of
    the batches seen so far (``seen``) and their confusion matrix (``state``), from which
    ``incremental(model, start, state=...)`` continues after that batch."""

    random_order = False  # a sure bound needs no random order
    resumable = True

    def __init__(self, adapter: Any):
        self.adapter, self.images = adapter, len(adapter.eval_set)
        self.num_classes, self.keys = 0, []
        self._unseen: list[torch.Tensor] | None = None  # per batch: labelled pixels left after it

    def _batches(self) -> CachedBatches:
        a = self.adapter
        if a._eval_batches is None:  # the batches adapter.evaluate decodes once
            a._eval_batches = CachedBatches(make_loader(a.eval_set, a.batch_size, shuffle=False,
                                                        num_workers=a.num_workers),
                                            device=a.device)
        return a._eval_batches

    def _count(self, masks: torch.Tensor) -> torch.Tensor:
        valid = masks != self.adapter.ignore_index if self.adapter.ignore_index is not None \
            else torch.ones_like(masks, dtype=torch.bool)
        return torch.bincount(masks[valid].long().flatten(), minlength=self.num_classes
                              )[:self.num_classes].cpu()

    def incremental(self, model: nn.Module, start: int = 0, state: torch.Tensor | None = None
                    ) -> Iterator[Step]:
        if self._unseen is None:
            self.num_classes, self.keys = self.adapter.metric_classes(model)
            per_batch = [self._count(masks) for _, masks in self._batches()]
            left = torch.stack(per_batch).flip(0).cumsum(0).flip(0)
            self._unseen = [*left[1:], torch.zeros(self.num_classes, dtype=torch.long)]
        conf = torch.zeros(self.num_classes, self.num_classes, dtype=torch.long)
        if start:
            if not isinstance(state, torch.Tensor) or state.dtype != conf.dtype or \
                    state.shape != conf.shape:
                raise ValueError(f"a bounded mIoU evaluation continued at image {start} needs "
                                 f"the confusion matrix of the images before it ({self.num_classes}"
                                 f" x {self.num_classes} integers, a step's state)")
            conf = state  # never changed in place: each step makes a new matrix
        device = self.adapter.device
        model.to(device)
        last, upto = len(self._unseen) - 1, 0  # images up to this batch's end
        for k, (images, masks) in enumerate(self._batches()):
            upto += len(images)
            if upto <= start:
                continue
            if upto - len(images) < start:
                raise ValueError(f"start={start} is not at a batch boundary")
            logits = model(images.to(device))
            conf = conf + confusion_matrix(logits.argmax(1), masks.to(device), self.num_classes,
                                           self.adapter.ignore_index)
            if k == last:
                value = segmentation_metrics(conf, self.keys)["miou"]
                yield Step(len(images), low=value, high=value, value=value, seen=value,
                           state=conf)
            else:
                low, high = miou_bounds(conf, self._unseen[k])
                yield Step(len(images), low=low, high=high, seen=seen_miou(conf), state=conf)
