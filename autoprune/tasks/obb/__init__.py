"""Oriented-box detection with Ultralytics YOLO OBB models: ``from autoprune import obb``. Built
on the detection package (its split-free patches, the trainer that keeps the pruned module, its
one-call flow).

api.py: the public calls; adapter.py: the task adapter; data.py: rotated-box label checks;
models.py: the OBB head's fixed layers, trainer and validator; names.py: the YOLO OBB names;
profile.py: how its DEFAULT profiles are measured.
"""
from .adapter import OBBAdapter
from .api import TrainResult, analyze_sensitivity, export_onnx, load_model, resume, train

__all__ = ["OBBAdapter", "TrainResult", "analyze_sensitivity", "export_onnx", "load_model",
           "resume", "train"]
