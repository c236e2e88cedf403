"""Ultralytics YOLO OBB surgery on top of :mod:`autoprune.tasks.detection.models` (offline set-up,
split-free twins, the trainer that keeps the pruned module): the OBB head, its layers that must
keep their channels, and the OBB twins of the trainer and validator."""
from __future__ import annotations

import torch.nn as nn

from ..detection import models as yolo  # first: sets Ultralytics' offline environment

from ultralytics.models.yolo.obb import OBBTrainer, OBBValidator  # noqa: E402
from ultralytics.nn.modules import OBB  # noqa: E402
from ultralytics.nn.tasks import OBBModel  # noqa: E402


def obb_head(model: nn.Module) -> OBB | None:
    """The model's YOLO OBB head (OBB or OBB26), None when it has none."""
    heads = [m for m in model.modules() if isinstance(m, OBB)]
    return heads[-1] if heads else None


def ignored_layers(model: nn.Module) -> list[nn.Module]:
    """The detection head's fixed layers (:func:`~..detection.models.ignored_layers`): the last
    conv of each box, class and angle branch (``cv4``, whose ``ne`` outputs are the angles, and
    the ``one2one_*`` twins), DFL and attention blocks. OBB and OBB26 add nothing else."""
    return yolo.ignored_layers(model)


class PatientOBBValidator(OBBValidator):
    """OBBValidator whose (rotated) NMS has no time limit (same results, independent of load)."""

    def postprocess(self, preds):
        with yolo.patient_nms():
            return super().postprocess(preds)


class KeepModuleOBBTrainer(yolo.KeepModuleTrainer, OBBTrainer):
    """OBBTrainer that trains the module it is given (see
    :class:`~..detection.models.KeepModuleTrainer`), validating with
    :class:`PatientOBBValidator`."""

    def get_validator(self):
        validator = OBBTrainer.get_validator(self)
        validator.__class__ = PatientOBBValidator
        return validator


__all__ = ["KeepModuleOBBTrainer", "OBBModel", "PatientOBBValidator", "ignored_layers",
           "obb_head"]
