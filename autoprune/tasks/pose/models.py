"""Ultralytics YOLO pose surgery on top of :mod:`autoprune.tasks.detection.models` (offline set-up,
split-free twins, the trainer that keeps the pruned module): the keypoint head's layers that
must keep their channels, and the task's classes with the pose twins of the trainer and
validator (:data:`TASK`)."""
from __future__ import annotations

import torch.nn as nn

from ..detection import models as yolo  # first: sets Ultralytics' offline environment
from ..detection.family import sub_task

from ultralytics.models.yolo.pose import PoseTrainer, PoseValidator  # noqa: E402
from ultralytics.nn.modules import Pose  # noqa: E402
from ultralytics.nn.tasks import PoseModel  # noqa: E402

# YOLO26's Pose26: the 1x1 convs after cv4 that give the keypoints and (in training) their
# spread, and the normalising flow of its loss
KEYPOINT_OUTPUTS = ("cv4_kpts", "cv4_sigma", "one2one_cv4_kpts", "one2one_cv4_sigma",
                    "flow_model")


def pose_head(model: nn.Module) -> Pose | None:
    """The model's YOLO Pose head (Pose or Pose26), None when it has none."""
    return yolo.detect_head(model, Pose)


def kpt_shape_of(model: nn.Module) -> list[int] | None:
    """``[keypoints, values per keypoint]`` the model predicts, None without a Pose head."""
    head = pose_head(model)
    return [int(v) for v in head.kpt_shape] if head is not None else None


def ignored_layers(model: nn.Module) -> list[nn.Module]:
    """The detection head's fixed layers (:func:`~..detection.models.ignored_layers`: the last
    conv of each box, class and keypoint branch ``cv4``, DFL, attention) plus, in YOLO26's
    Pose26, the keypoint and spread convs after ``cv4`` (their ``K x ndim`` / ``K x 2`` outputs
    are the keypoints) and the normalising flow its loss uses. The spread convs run only in
    training: the eval-mode graph does not see them, so ``cv4``'s last conv, which feeds them,
    keeps its channels too (the detection list has it)."""
    return yolo.ignored_layers(model, Pose, KEYPOINT_OUTPUTS)


# Ultralytics' classes of the task, and the twins of its trainer (keeps the pruned module) and
# validator (NMS without a time limit), made by the YOLO base as classes of this module
TASK = sub_task("pose", PoseModel, Pose, PoseTrainer, PoseValidator, ignored_layers, __name__)
KeepModulePoseTrainer, PatientPoseValidator = TASK.trainer, TASK.validator

__all__ = ["KEYPOINT_OUTPUTS", "KeepModulePoseTrainer", "PatientPoseValidator", "PoseModel",
           "TASK", "ignored_layers", "kpt_shape_of", "pose_head"]
