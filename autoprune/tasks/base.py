"""The task contract, now :mod:`autoprune.flow.contract` (this name is kept for tasks written
against it)."""
from ..flow.contract import TaskAdapter, TrainResult

__all__ = ["TaskAdapter", "TrainResult"]
