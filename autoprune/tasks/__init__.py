"""Task adapters, one per task, behind the :class:`~autoprune.tasks.base.TaskAdapter` protocol."""
from __future__ import annotations

import importlib
from typing import Any

from ..errors import ConfigError
from .base import TaskAdapter, TrainResult

# task name -> (module under autoprune.tasks, adapter class)
ADAPTERS = {
    "classification": ("classification", "ClassificationAdapter"),
    "detection": ("detection", "DetectionAdapter"),
    "segmentation": ("segmentation", "SegmentationAdapter"),
}
TASKS = tuple(ADAPTERS)


def get_adapter(task: str, **kwargs: Any) -> TaskAdapter:
    """A fresh adapter for ``task`` (kwargs go to its constructor)."""
    if task not in ADAPTERS:
        raise ConfigError(f"unknown task {task!r}: choose one of {', '.join(TASKS)}")
    module, cls = ADAPTERS[task]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)(**kwargs)


__all__ = ["ADAPTERS", "TASKS", "TaskAdapter", "TrainResult", "get_adapter"]
