"""Ultralytics RT-DETR surgery on top of :mod:`autoprune.tasks.detection.models` (offline set-up,
the trainer that keeps the pruned module, the traceable twins of RT-DETR's decoder and AIFI in
:mod:`~..detection.rtdetr_blocks`): the layers whose widths stay, the least input size, and the
task's classes with the twins of Ultralytics' RT-DETR trainer and validator (:data:`TASK`).

What prunes: the HGNetv2 backbone (stem, HG blocks, their light convs) and the hybrid encoder's
convolutions (input projections, lateral and downsample convs, RepC3 fusion blocks). What keeps
its widths: the encoder's transformer layer (AIFI: attention heads, its input width and MLP) and
the whole transformer decoder (input projections' outputs, queries, heads, denoising embeddings).
"""
from __future__ import annotations

import math

import torch.nn as nn

from ..detection import models as yolo  # first: sets Ultralytics' offline environment
from ..detection.family import sub_task

from ultralytics.models.rtdetr.train import RTDETRTrainer  # noqa: E402
from ultralytics.models.rtdetr.val import RTDETRValidator  # noqa: E402
from ultralytics.nn.modules.head import RTDETRDecoder  # noqa: E402
from ultralytics.nn.modules.transformer import AIFI  # noqa: E402
from ultralytics.nn.tasks import RTDETRDetectionModel  # noqa: E402

# the parts whose widths stay, by name (reported with the groups the rest forms)
KEPT_PARTS = {"RTDETRDecoder": "the transformer decoder (queries, heads, hidden width)",
              "AIFI": "the encoder's transformer layer (attention heads, its width)"}


def decoder(model: nn.Module) -> RTDETRDecoder | None:
    """The model's RT-DETR decoder head, None when it has none."""
    return yolo.detect_head(model, RTDETRDecoder)


def ignored_layers(model: nn.Module) -> list[nn.Module]:
    """Every layer of the decoder and of each AIFI (see the module doc), and the detection
    list's attention blocks."""
    out = list(yolo.ignored_layers(model))
    for m in model.modules():
        if isinstance(m, (RTDETRDecoder, AIFI)):
            out.extend(m.modules())
    seen: set[int] = set()
    return [m for m in out if not (id(m) in seen or seen.add(id(m)))]


def expose_classes(model: nn.Module) -> nn.Module:
    """``model`` with its decoder's class count as ``model.nc``, where the YOLO base reads a
    head it does not know (its ``model_nc``)."""
    head = decoder(model)
    if head is not None:
        model.nc = head.nc
    return model


def least_input_size(model: nn.Module) -> int:
    """The least input size (a multiple of 32) whose feature levels (strides 8, 16, 32... one
    per decoder level) hold at least as many anchors as the decoder selects queries (300 for
    rtdetr-l / rtdetr-x): at 64 px a 3-level decoder has 84 anchors and its query selection
    fails."""
    head = decoder(model)
    if head is None:
        return 32
    strides = [8 * 2 ** level for level in range(head.nl)]
    size = 32
    while sum(math.floor(size / s) ** 2 for s in strides) < head.num_queries:
        size += 32
    return size


# Ultralytics' classes of the task (RT-DETR is detection to Ultralytics), and the twins of its
# trainer (keeps the pruned module) and validator, made by the YOLO base as classes of this module
TASK = sub_task("detect", RTDETRDetectionModel, RTDETRDecoder, RTDETRTrainer, RTDETRValidator,
                ignored_layers, __name__)
KeepModuleRTDETRTrainer, PatientRTDETRValidator = TASK.trainer, TASK.validator

__all__ = ["KEPT_PARTS", "KeepModuleRTDETRTrainer", "PatientRTDETRValidator",
           "RTDETRDetectionModel", "TASK", "decoder", "expose_classes", "ignored_layers",
           "least_input_size"]
