"""Classification with timm and torchvision models: ``from autoprune import classification as cls``.

api.py: the public calls; adapter.py: the task adapter; models.py: torchvision models made
prunable; profile.py: how its DEFAULT profiles are measured.
"""
from .adapter import ClassificationAdapter
from .api import TrainResult, analyze_sensitivity, load_model, train

__all__ = ["ClassificationAdapter", "TrainResult", "analyze_sensitivity", "load_model", "train"]
