"""Ultralytics YOLO-seg surgery on top of :mod:`autoprune.tasks.detection.models` (offline set-up,
split-free twins, the trainer that keeps the pruned module): the segment head's layers that must
keep their channels, and the segment twins of the trainer and validator."""
from __future__ import annotations

import torch.nn as nn

from ..detection import models as yolo  # first: sets Ultralytics' offline environment

from ultralytics.models.yolo.segment import (SegmentationTrainer,  # noqa: E402
                                             SegmentationValidator)
from ultralytics.nn.modules import Segment  # noqa: E402
from ultralytics.nn.tasks import SegmentationModel  # noqa: E402


def segment_head(model: nn.Module) -> Segment | None:
    """The model's YOLO Segment head (Segment or Segment26), None when it has none."""
    heads = [m for m in model.modules() if isinstance(m, Segment)]
    return heads[-1] if heads else None


def ignored_layers(model: nn.Module) -> list[nn.Module]:
    """The detection head's fixed layers (:func:`~..detection.models.ignored_layers`: the last
    conv of each box, class and mask-coefficient branch, DFL, attention) plus the prototype
    head's last conv (its ``nm`` prototypes pair with the ``nm`` mask coefficients). YOLO26's
    Proto26 also keeps its ``feat_refine`` convs (so the P3 features keep their width: the
    training-only ``semseg`` branch that reads them is not seen by the eval-mode graph) and the
    semantic branch itself."""
    out = yolo.ignored_layers(model)
    for head in model.modules():
        if not isinstance(head, Segment):
            continue
        proto = head.proto
        out.extend(proto.cv3.modules())
        for key in ("feat_refine", "semseg"):
            part = getattr(proto, key, None)
            if isinstance(part, nn.Module):
                out.extend(part.modules())
    seen: set[int] = set()
    return [m for m in out if not (id(m) in seen or seen.add(id(m)))]


class PatientSegmentationValidator(SegmentationValidator):
    """SegmentationValidator whose NMS has no time limit (same results, independent of load)."""

    def postprocess(self, preds):
        with yolo.patient_nms():
            return super().postprocess(preds)


class KeepModuleSegmentationTrainer(yolo.KeepModuleTrainer, SegmentationTrainer):
    """SegmentationTrainer that trains the module it is given (see
    :class:`~..detection.models.KeepModuleTrainer`), validating with
    :class:`PatientSegmentationValidator`."""

    def get_validator(self):
        validator = SegmentationTrainer.get_validator(self)
        validator.__class__ = PatientSegmentationValidator
        return validator


__all__ = ["KeepModuleSegmentationTrainer", "PatientSegmentationValidator", "SegmentationModel",
           "ignored_layers", "segment_head"]
