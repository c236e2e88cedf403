"""Detection with Ultralytics YOLO: ``from autoprune import detection as det``.

api.py: the public calls; adapter.py: the task adapter; data.py: data.yaml and label checks;
models.py: the Ultralytics surgery in one namespace, gathered from offline.py (the offline set-up),
twins.py (split-free blocks), native.py (native blocks written back), head.py (the layers that
keep their channels), console.py (Ultralytics' output), checkpoints.py (safe reading),
validator.py, ddp.py (torchrun helpers) and trainer.py (the trainer that keeps the pruned
module); names.py: the YOLO families and their names; profile.py: how its DEFAULT profiles are
measured.
"""
from .adapter import DetectionAdapter
from .api import (DEPRECATED, TrainResult, analyze_sensitivity, export_onnx, load_model, resume,
                  train)

__all__ = ["DEPRECATED", "DetectionAdapter", "TrainResult", "analyze_sensitivity", "export_onnx",
           "load_model", "resume", "train"]
