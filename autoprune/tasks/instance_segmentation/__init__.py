"""Instance segmentation with Ultralytics YOLO-seg: ``from autoprune import instance_segmentation
as iseg``. Built on the detection package (its split-free patches, the trainer that keeps the
pruned module, its one-call flow).

api.py: the public calls; adapter.py: the task adapter; data.py: polygon-label checks; models.py:
the segment head's fixed layers, trainer and validator; names.py: the YOLO-seg names; profile.py:
how its DEFAULT profiles are measured.
"""
from .adapter import InstanceSegmentationAdapter
from .api import TrainResult, analyze_sensitivity, export_onnx, load_model, resume, train

__all__ = ["InstanceSegmentationAdapter", "TrainResult", "analyze_sensitivity", "export_onnx",
           "load_model", "resume", "train"]
