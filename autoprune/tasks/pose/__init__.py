"""Pose estimation with Ultralytics YOLO pose models: ``from autoprune import pose``. Built on the
detection package (its split-free patches, the trainer that keeps the pruned module, its one-call
flow).

api.py: the public calls; adapter.py: the task adapter; data.py: keypoint-label and kpt_shape
checks; models.py: the keypoint head's fixed layers, trainer and validator; names.py: the YOLO
pose names; profile.py: how its DEFAULT profiles are measured.
"""
from .adapter import PoseAdapter
from .api import TrainResult, analyze_sensitivity, export_onnx, load_model, resume, train

__all__ = ["PoseAdapter", "TrainResult", "analyze_sensitivity", "export_onnx", "load_model",
           "resume", "train"]
