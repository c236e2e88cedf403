"""Task adapters, one per task, behind the :class:`~autoprune.tasks.base.TaskAdapter` protocol."""
from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .base import TaskAdapter, TrainResult

TASKS = ("classification",)


def get_adapter(task: str, **kwargs: Any) -> TaskAdapter:
    """A fresh adapter for ``task`` (kwargs go to its constructor)."""
    if task == "classification":
        from .classification import ClassificationAdapter

        return ClassificationAdapter(**kwargs)
    raise ConfigError(f"unknown task {task!r}: choose one of {', '.join(TASKS)}")


__all__ = ["TASKS", "TaskAdapter", "TrainResult", "get_adapter"]
