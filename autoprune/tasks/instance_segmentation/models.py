"""Ultralytics YOLO-seg surgery on top of :mod:`autoprune.tasks.detection.models` (offline set-up,
split-free twins, the trainer that keeps the pruned module): the segment head's layers that must
keep their channels, and the task's classes with the segment twins of the trainer and validator
(:data:`TASK`)."""
from __future__ import annotations

import torch.nn as nn

from ..detection import models as yolo  # first: sets Ultralytics' offline environment
from ..detection.family import sub_task

from ultralytics.models.yolo.segment import (SegmentationTrainer,  # noqa: E402
                                             SegmentationValidator)
from ultralytics.nn.modules import Segment  # noqa: E402
from ultralytics.nn.tasks import SegmentationModel  # noqa: E402

# the prototype head's last conv, and YOLO26's Proto26 feature refinement and semantic branch
PROTOTYPE_PARTS = ("proto.cv3", "proto.feat_refine", "proto.semseg")


def segment_head(model: nn.Module) -> Segment | None:
    """The model's YOLO Segment head (Segment or Segment26), None when it has none."""
    return yolo.detect_head(model, Segment)


def ignored_layers(model: nn.Module) -> list[nn.Module]:
    """The detection head's fixed layers (:func:`~..detection.models.ignored_layers`: the last
    conv of each box, class and mask-coefficient branch, DFL, attention) plus the prototype
    head's last conv (its ``nm`` prototypes pair with the ``nm`` mask coefficients). YOLO26's
    Proto26 also keeps its ``feat_refine`` convs (so the P3 features keep their width: the
    training-only ``semseg`` branch that reads them is not seen by the eval-mode graph) and the
    semantic branch itself."""
    return yolo.ignored_layers(model, Segment, PROTOTYPE_PARTS)


# Ultralytics' classes of the task, and the twins of its trainer (keeps the pruned module) and
# validator (NMS without a time limit), made by the YOLO base as classes of this module
TASK = sub_task("segment", SegmentationModel, Segment, SegmentationTrainer, SegmentationValidator,
                ignored_layers, __name__)
KeepModuleSegmentationTrainer, PatientSegmentationValidator = TASK.trainer, TASK.validator

__all__ = ["KeepModuleSegmentationTrainer", "PROTOTYPE_PARTS", "PatientSegmentationValidator",
           "SegmentationModel", "TASK", "ignored_layers", "segment_head"]
