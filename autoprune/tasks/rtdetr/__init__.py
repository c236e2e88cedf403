"""Real-time DETR (Ultralytics' RT-DETR: ``rtdetr-l``, ``rtdetr-x``): ``from autoprune import
rtdetr``. Built on the detection package (the trainer that keeps the pruned module, its data
formats and one-call flow); the CNN backbone and the hybrid encoder's convolutions prune, the
transformer layers keep their widths.

api.py: the public calls; adapter.py: the task adapter; models.py: the layers that keep their
widths, the least input size, the trainer and validator; names.py: the RT-DETR names;
profile.py: how its DEFAULT profiles are measured.
"""
from .adapter import RTDETRAdapter
from .api import TrainResult, analyze_sensitivity, export_onnx, load_model, resume, train

__all__ = ["RTDETRAdapter", "TrainResult", "analyze_sensitivity", "export_onnx", "load_model",
           "resume", "train"]
