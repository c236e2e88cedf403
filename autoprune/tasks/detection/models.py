"""Ultralytics YOLO surgery, in one namespace (``from autoprune.tasks.detection import models as
yolo``): the offline set-up (:mod:`.offline`), the split-free twins of C2f/C3k2/C2PSA/PSA/ELAN
(:mod:`.twins`) and of YOLOv9's ADown/CBLinear (:mod:`.yolov9`), the native blocks written back
in their place (:mod:`.native`), the layers that must keep their channels (:mod:`.head`),
Ultralytics' output (:mod:`.console`), safe checkpoint reading (:mod:`.checkpoints`), the
validator without an NMS time limit (:mod:`.validator`), torchrun helpers (:mod:`.ddp`) and the
trainer that fine-tunes the given (pruned) module (:mod:`.trainer`).

Importing it sets the offline environment before Ultralytics is imported; nothing here opens a
network connection. The split-free twins keep this module's name in the checkpoints that hold
them (see :mod:`.twins`).
"""
from __future__ import annotations

from .offline import FONTS, setup_offline  # first: the offline environment before Ultralytics

import ultralytics  # noqa: E402
from ultralytics import YOLO  # noqa: E402
from ultralytics.engine.model import Model as YOLOModel  # noqa: E402  (YOLO objects)
from ultralytics.models.yolo.detect import DetectionTrainer, DetectionValidator  # noqa: E402
from ultralytics.nn.modules import C2PSA, PSA, C2f, Conv, Detect  # noqa: E402
from ultralytics.nn.modules.block import DFL, Attention, RepNCSPELAN4  # noqa: E402
from ultralytics.nn.tasks import DetectionModel  # noqa: E402
from ultralytics.utils import DEFAULT_CFG_DICT  # noqa: E402

from .checkpoints import load_ultralytics, load_ultralytics_file, read_ultralytics  # noqa: E402
from .console import quiet  # noqa: E402
from .ddp import one_process, plain_batchnorm  # noqa: E402
from .head import detect_head, ignored_layers, model_nc  # noqa: E402
from .native import NativeWrite, native_block, to_native, write_native  # noqa: E402
from .trainer import (DistillationModel, KeepModuleTrainer, drop_feature_hooks,  # noqa: E402
                      keep_module_trainer, resume_training)
from .twins import (PADDED, SPLIT_FREE, TWINS, C2fSplitFree, C2PSASplitFree,  # noqa: E402
                    ELANSplitFree, PSASplitFree, is_patched, patch_model)
from .rtdetr_blocks import AIFITraceable, RTDETRDecoderTraceable  # noqa: E402
from .yolov9 import ADownMatched, CBLinearSplitFree  # noqa: E402
from .validator import PatientValidator, patient_nms  # noqa: E402

__all__ = ["ADownMatched", "C2PSASplitFree", "C2fSplitFree", "CBLinearSplitFree",
           "DetectionModel", "DetectionValidator", "AIFITraceable",
           "RTDETRDecoderTraceable",
           "DEFAULT_CFG_DICT", "DistillationModel", "drop_feature_hooks",
           "ELANSplitFree", "KeepModuleTrainer", "NativeWrite", "PSASplitFree", "PatientValidator",
           "SPLIT_FREE", "detect_head", "ignored_layers", "is_patched", "keep_module_trainer",
           "load_ultralytics", "load_ultralytics_file", "model_nc", "one_process", "patch_model",
           "plain_batchnorm", "read_ultralytics", "resume_training", "quiet", "setup_offline",
           "to_native", "ultralytics", "write_native", "YOLOModel"]
# and the names this module held before it was split into the modules above
__all__ += ["FONTS", "PADDED", "TWINS", "YOLO", "Attention", "C2PSA", "C2f", "Conv", "DFL",
            "Detect", "DetectionTrainer", "PSA", "RepNCSPELAN4", "native_block", "patient_nms"]
