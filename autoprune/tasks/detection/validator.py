"""Ultralytics' detection validator with an NMS that has no time limit: the same results,
independent of the machine's load; rotated boxes compared within their class only."""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from . import offline  # noqa: F401  (first: the offline environment before Ultralytics)

from ultralytics.models.yolo.detect import DetectionValidator  # noqa: E402
from ultralytics.utils import nms  # noqa: E402
from ultralytics.utils.metrics import batch_probiou  # noqa: E402

MAX_WH = 7680  # Ultralytics' default offset between the boxes of two classes (``max_wh``)
# Rotated boxes are compared class by class only where the bound below holds: every centre
# within RESIDUAL px of its class's offset, every side at most SIDE px. Boxes of different
# classes are then at least (MAX_WH - 2 RESIDUAL) sqrt(2) px apart, and the Bhattacharyya
# distance of two such boxes is at least 3 d^2 / (w1^2 + w2^2) > 60: Ultralytics' probiou of
# the pair is below 0, never above an IoU threshold, so no box of one class can suppress a box
# of another in its computation either.
RESIDUAL, SIDE, GROUPED_FROM = 2000.0, 800.0, 256


@contextlib.contextmanager
def patient_nms() -> Iterator[None]:
    """Ultralytics' NMS stops after 2 s + 0.05 s per image and drops the rest: on a loaded CPU
    that makes mAP (and every sensitivity point) depend on the machine's load. Lift the limit."""
    original, fast_nms = nms.non_max_suppression, nms.TorchNMS.__dict__["fast_nms"]

    def patient(*args, **kwargs):
        kwargs.setdefault("max_time_img", 1e6)
        grouped = class_by_class(fast_nms.__func__, float(kwargs.get("max_wh", MAX_WH)))
        nms.TorchNMS.fast_nms = staticmethod(grouped)
        try:
            return original(*args, **kwargs)
        finally:
            nms.TorchNMS.fast_nms = fast_nms

    nms.non_max_suppression = patient
    try:
        yield
    finally:
        nms.non_max_suppression = original


def class_by_class(fast_nms, max_wh: float = MAX_WH):
    """Ultralytics' ``TorchNMS.fast_nms`` for rotated boxes (``iou_func=batch_probiou``) that
    computes the probiou of boxes of the same class only (the classes told apart by the offset
    ``max_wh`` Ultralytics adds to each class's centres): the same kept boxes in the same order,
    with a fraction of the n x n probiou matrix (15 classes: 1/15 of the time and memory; an
    analysis point of a heavily pruned model can hold tens of thousands of candidate boxes).
    Any other call, and boxes outside the bound that makes it exact (see :data:`RESIDUAL`), go
    to ``fast_nms`` as they are."""

    def grouped(boxes, scores, iou_threshold, use_triu=True, iou_func=None, exit_early=True,
                **more):
        kwargs = dict(use_triu=use_triu, exit_early=exit_early, **more)
        if iou_func is not None:
            kwargs["iou_func"] = iou_func
        if iou_func is not batch_probiou or not use_triu or more or len(boxes) < GROUPED_FROM:
            return fast_nms(boxes, scores, iou_threshold, **kwargs)
        keys = torch.floor(boxes[:, 0] / max_wh + 0.5)
        residual, classes = boxes[:, :2] - keys[:, None] * max_wh, torch.unique(keys)
        if not bool(torch.isfinite(boxes).all()) or bool(residual.abs().max() > RESIDUAL) or \
                bool(boxes[:, 2:4].abs().max() > SIDE) or len(classes) < 2:
            return fast_nms(boxes, scores, iou_threshold, **kwargs)
        order = torch.argsort(scores, descending=True)  # as fast_nms orders them
        ordered_keys, kept = keys[order], torch.zeros(len(boxes), dtype=torch.bool,
                                                      device=boxes.device)
        for key in classes:
            where = torch.nonzero(ordered_keys == key).squeeze(-1)  # this class, score order
            same = boxes[order[where]]
            ious = batch_probiou(same, same).triu_(diagonal=1)
            kept[where[(ious > iou_threshold).sum(0) <= 0]] = True
        return order[torch.nonzero(kept).squeeze(-1)]

    return grouped


class PatientNMS:
    """A validator mixin (before Ultralytics' validator class in the bases): its NMS without a
    time limit (:func:`patient_nms`); and, when the caller hands it a model that is already its
    own copy (``given_a_copy = True``, as autoprune's evaluation does), no second deep copy of
    that model (Ultralytics copies a standalone model before fusing it: 0.1 s of each of the
    hundreds of evaluations of a YOLO sensitivity analysis)."""

    given_a_copy = False

    def postprocess(self, preds):
        with patient_nms():
            return super().postprocess(preds)

    def get_model(self, model, trainer=None, **kwargs):
        if trainer is None and self.given_a_copy and model is not None:
            return model
        return super().get_model(model, trainer, **kwargs)


class PatientValidator(PatientNMS, DetectionValidator):
    """DetectionValidator whose NMS has no time limit (same results, independent of load)."""


__all__ = ["PatientNMS", "PatientValidator", "class_by_class", "patient_nms"]
