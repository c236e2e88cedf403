"""The tasks: one package per task (``classification/``, ``detection/``, ``segmentation/``,
``instance_segmentation/``), each behind the :class:`~autoprune.tasks.base.TaskAdapter` contract
and registered in :mod:`autoprune.tasks.registry`."""
from __future__ import annotations

from .base import TaskAdapter, TrainResult
from .registry import TASKS, Task, get_adapter, get_task, register_task, task_of

__all__ = ["TASKS", "Task", "TaskAdapter", "TrainResult", "get_adapter", "get_task",
           "register_task", "task_of"]
