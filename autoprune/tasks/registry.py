"""The task registry, now :mod:`autoprune.flow.registry` (this name is kept for code written
against it); the built-in tasks register in :mod:`autoprune.tasks`."""
from ..flow.registry import TASKS, Task, get_adapter, get_task, register_task, task_of

__all__ = ["TASKS", "Task", "get_adapter", "get_task", "register_task", "task_of"]
