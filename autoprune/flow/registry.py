"""The task registry: one :class:`Task` entry per task, looked up by name (the flow's side of the
seam: the flow finds tasks here, tasks register themselves from above).

An entry names its parts by import path ("module:attribute"), so listing the tasks (``autoprune
--help``, ``profiles list``) imports no model library; a part is imported when it is first used.
A task is one package under ``autoprune/tasks/<task>/`` plus one :func:`register_task` statement
(the built-in ones in :mod:`autoprune.tasks`)::

    register_task(Task("classification", package="autoprune.tasks.classification", ...))

A third-party package registers its own task the same way, before calling autoprune.
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

from ..errors import ConfigError
from .contract import TaskAdapter


@dataclass(frozen=True)
class Task:
    """A registered task.

    package: the task's public API module (``train``, ``analyze_sensitivity``, ``load_model``),
        reachable as ``autoprune.<name>``.
    adapter: "module:Class" of its :class:`~autoprune.flow.contract.TaskAdapter`.
    resolve_arch: "module:function" turning a model name into the task's architecture key (a
        ConfigError when the name is not the task's); it must not import heavy libraries the
        name check does not need.
    profile: "module:function" measuring a DEFAULT profile on public data (``autoprune profiles
        build``): ``f(key, work_dir, settings, ratios, *, device, progress, **extra)`` returns
        ``(sensitivity file, how it was made)``.
    profile_settings: the defaults of a profile build (epochs, train_images, val_images,
        input_size, batch_size).
    arch_help / config_example / data_key: words for the CLI (``--arch`` help, a YAML example,
        the YAML key holding the training data).
    example: a small model of the task (docs, the contract's conformance test).
    settings: "module:Class" of the task's settings dataclass (a
        :class:`~autoprune.flow.config.TaskSettings`).
    inputs: the names of ``train``'s inputs (not settings) and their defaults, in order (a
        required one: ``REQUIRED``); ``positional``: the leading names ``train`` takes
        positionally (inputs or settings); ``aliases``: other names of an input.
    """

    name: str
    package: str
    adapter: str
    resolve_arch: str
    profile: str
    profile_settings: dict[str, Any] = field(default_factory=dict)
    arch_help: str = ""
    config_example: str = ""
    data_key: str = "train_data"
    example: str = ""
    settings: str = ""
    inputs: dict[str, Any] = field(default_factory=lambda: {
        "model": REQUIRED, "train_data": REQUIRED, "eval_data": None})
    positional: tuple[str, ...] = ("model", "train_data", "eval_data")
    aliases: dict[str, str] = field(default_factory=dict)

    def api(self) -> ModuleType:
        """The task's public API module."""
        return importlib.import_module(self.package)

    def adapter_class(self) -> type[TaskAdapter]:
        """The task's adapter class."""
        return _load(self.adapter)

    def arch_key(self, name: str) -> str:
        """The task's key for the model name ``name`` (a ConfigError when not the task's)."""
        return _load(self.resolve_arch)(name)

    def settings_class(self) -> type:
        """The task's settings dataclass."""
        return _load(self.settings)

    def profile_builder(self) -> Callable[..., Any]:
        """The function that measures a DEFAULT profile for the task."""
        return _load(self.profile)


REQUIRED = inspect.Parameter.empty  # an input ``train`` cannot do without


def _load(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


TASKS: dict[str, Task] = {}


def register_task(task: Task) -> Task:
    """Add ``task`` to :data:`TASKS` (a task of the same name is replaced)."""
    if not task.name.isidentifier():
        raise ConfigError(f"task name {task.name!r} must be a Python identifier (it is reached "
                          f"as autoprune.<name>)")
    TASKS[task.name] = task
    return task


def get_task(name: str) -> Task:
    """The registered task ``name``, or a ConfigError listing the registered ones."""
    if not isinstance(name, str):
        raise ConfigError(f"task {name!r:.60} must be one name: one of {', '.join(TASKS)}")
    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r}: choose one of {', '.join(TASKS)}")
    return TASKS[name]


def get_adapter(task: str, **kwargs: Any) -> TaskAdapter:
    """A fresh adapter for ``task`` (kwargs go to its constructor)."""
    return get_task(task).adapter_class()(**kwargs)


def task_of(name: str) -> str:
    """The one registered task whose names include ``name`` (``yolov8n`` -> detection,
    ``smp/unet/resnet18`` -> segmentation, ``resnet18`` -> classification)."""
    owners = []
    for task in TASKS.values():
        try:
            task.arch_key(name)
        except ConfigError:
            continue
        owners.append(task.name)
    if len(owners) == 1:
        return owners[0]
    examples = "; ".join(f"{t.name}: {t.arch_help}" for t in TASKS.values() if t.arch_help)
    if owners:
        raise ConfigError(f"{name!r} names a model of several tasks ({', '.join(owners)}): pass "
                          f"--task")
    raise ConfigError(f"cannot tell the task of {name!r}: use {examples}; or pass --task")
