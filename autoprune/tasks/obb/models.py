"""Ultralytics YOLO OBB surgery on top of :mod:`autoprune.tasks.detection.models` (offline set-up,
split-free twins, the trainer that keeps the pruned module): the OBB head, its layers that must
keep their channels, and the task's classes with the OBB twins of the trainer and validator
(:data:`TASK`)."""
from __future__ import annotations

import torch.nn as nn

from ..detection import models as yolo  # first: sets Ultralytics' offline environment
from ..detection.family import sub_task

from ultralytics.models.yolo.obb import OBBTrainer, OBBValidator  # noqa: E402
from ultralytics.nn.modules import OBB  # noqa: E402
from ultralytics.nn.tasks import OBBModel  # noqa: E402


def obb_head(model: nn.Module) -> OBB | None:
    """The model's YOLO OBB head (OBB or OBB26), None when it has none."""
    return yolo.detect_head(model, OBB)


def ignored_layers(model: nn.Module) -> list[nn.Module]:
    """The detection head's fixed layers (:func:`~..detection.models.ignored_layers`): the last
    conv of each box, class and angle branch (``cv4``, whose ``ne`` outputs are the angles, and
    the ``one2one_*`` twins), DFL and attention blocks. OBB and OBB26 add nothing else."""
    return yolo.ignored_layers(model)


# Ultralytics' classes of the task, and the twins of its trainer (keeps the pruned module) and
# validator (NMS without a time limit), made by the YOLO base as classes of this module
TASK = sub_task("obb", OBBModel, OBB, OBBTrainer, OBBValidator, ignored_layers, __name__)
KeepModuleOBBTrainer, PatientOBBValidator = TASK.trainer, TASK.validator

__all__ = ["KeepModuleOBBTrainer", "OBBModel", "PatientOBBValidator", "TASK", "ignored_layers",
           "obb_head"]
