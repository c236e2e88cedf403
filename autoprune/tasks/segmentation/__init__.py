"""Semantic segmentation with segmentation-models-pytorch: ``from autoprune import segmentation
as seg``.

api.py: the public calls; adapter.py: the task adapter; data.py: image/mask folders and the
Fashion-MNIST scenes; models.py: smp models and their names; metrics.py: IoU; profile.py: how its
DEFAULT profiles are measured.
"""
from .adapter import SegmentationAdapter
from .api import TrainResult, analyze_sensitivity, load_model, train

__all__ = ["SegmentationAdapter", "TrainResult", "analyze_sensitivity", "load_model", "train"]
