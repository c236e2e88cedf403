"""Detection with Ultralytics YOLO: ``from autoprune import detection as det``; the base of the
YOLO family (family.py: what another YOLO task declares in its own package, and what the base
derives from it).

api.py: the public calls (and ``sub_task_api`` for another YOLO task's); adapter.py: the task
adapter, delegating to sources.py (the data, read or converted), naming.py (which model a name or
file is), training.py (fit, resume, DDP, distillation), evaluation.py (the validator, metrics) and
deployed.py (ONNX export, INT8 calibration and validation), incremental.py (mAP batch by batch for
the adaptive analysis, with map_bound.py's sure upper bound); data.py: data.yaml and label checks;
formats/: COCO and Pascal VOC converted to YOLO labels, one format a module; models.py: the
Ultralytics surgery in one namespace, gathered from offline.py (the offline set-up), twins.py
(split-free blocks), native.py (native blocks written back), head.py (the layers that keep their
channels), console.py (Ultralytics' output), checkpoints.py (safe reading), validator.py, ddp.py
(torchrun helpers) and trainer.py (the trainer that keeps the pruned module); names.py: the YOLO
families and their names; profile.py: how its DEFAULT profiles are measured.
"""
from .adapter import DetectionAdapter
from .api import (DEPRECATED, TrainResult, analyze_sensitivity, export_onnx, load_model, resume,
                  train)

__all__ = ["DEPRECATED", "DetectionAdapter", "TrainResult", "analyze_sensitivity", "export_onnx",
           "load_model", "resume", "train"]
