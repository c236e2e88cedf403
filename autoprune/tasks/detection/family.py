"""The YOLO family: what a YOLO task declares about itself, and what the base (this package)
derives from it. Detection is the base; each other YOLO task is a package of its own that
declares, and the base names none of them:

- ``models.py``: a :class:`YoloTask`, Ultralytics' classes of the task (as Ultralytics'
  ``task_map`` lists them) and the layers of its head whose outputs stay;
- ``names.py``: a :class:`~.names.HeadVariant`, its models' names;
- ``adapter.py``: a subclass of :class:`~.adapter.DetectionAdapter` stating ``task``,
  ``metric``, ``kind``, ``ultralytics`` (the YoloTask), ``variant`` (the HeadVariant),
  ``metric_sources``, and where they differ from detection's its label check, loss weights
  (``train_arg_numbers``) and label kind for converted data (``labels``);
- ``api.py``: its public calls, from :func:`~.api.sub_task_api`;
- ``profile.py``: its scenes (:func:`~.profile.measure_with`);

plus one ``register_task`` line in :mod:`autoprune.tasks`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch.nn as nn

from . import models as yolo
from .validator import PatientNMS


@dataclass(frozen=True)
class YoloTask:
    """One Ultralytics task's classes: ``name`` (Ultralytics' task name), ``model`` (its model
    class), ``head`` (its head class, a Detect), ``trainer`` (its trainer that keeps the pruned
    module), ``validator`` (its validator without an NMS time limit) and ``ignored_layers`` (the
    layers whose output channels pruning must keep)."""

    name: str
    model: type
    head: type
    trainer: type
    validator: type
    ignored_layers: Callable[[nn.Module], list[nn.Module]]


DETECT = YoloTask("detect", yolo.DetectionModel, yolo.Detect, yolo.KeepModuleTrainer,
                  yolo.PatientValidator, yolo.ignored_layers)


def sub_task(name: str, model: type, head: type, trainer: type, validator: type,
             ignored_layers: Callable[[nn.Module], list[nn.Module]], module: str) -> YoloTask:
    """A YOLO sub-task's classes from Ultralytics' own ``trainer`` and ``validator`` of the task:
    their twins ``KeepModule<Trainer>`` (trains the module it is given, as
    :class:`~.trainer.KeepModuleTrainer`, validating with the other twin) and
    ``Patient<Validator>`` (NMS without a time limit, :class:`~.validator.PatientNMS`), made
    here as classes of ``module`` (the sub-task's models module, which names them)."""
    patient = type(f"Patient{validator.__name__}", (PatientNMS, validator), {
        "__module__": module, "__doc__": f"{validator.__name__} whose NMS has no time limit "
                                         f"(same results, independent of load)."})
    keep = type(f"KeepModule{trainer.__name__}", (yolo.KeepModuleTrainer, trainer), {
        "__module__": module, "patient_validator": patient,
        "__doc__": f"{trainer.__name__} that trains the module it is given (see "
                   f"KeepModuleTrainer), validating with {patient.__name__}."})
    return YoloTask(name, model, head, keep, patient, ignored_layers)


def declare(adapter: type) -> None:
    """Fill in what a YOLO adapter class derives from its declarations: from ``ultralytics`` (a
    :class:`YoloTask`) ``yolo_task``, ``model_class``, ``head_class``, ``trainer_class`` and
    ``validator_class``; from ``variant`` (a :class:`~.names.HeadVariant`) ``families``,
    ``arch_suffix``, ``canonical_arch``, ``resolve_arch`` and ``model_hint``. What the class
    sets itself stays."""
    own = vars(adapter)
    derived: dict[str, Any] = {}
    if "ultralytics" in own:
        task = own["ultralytics"]
        derived.update(yolo_task=task.name, model_class=task.model, head_class=task.head,
                       trainer_class=task.trainer, validator_class=task.validator)
    if "variant" in own:
        variant = own["variant"]
        derived.update(families=variant.families, arch_suffix=variant.suffix,
                       canonical_arch=staticmethod(variant.canonical),
                       resolve_arch=staticmethod(variant.resolve),
                       model_hint=f"a {adapter.kind} model (e.g. 'yolo11n{variant.suffix}.yaml')")
    for key, value in derived.items():
        if key not in own:
            setattr(adapter, key, value)


__all__ = ["DETECT", "YoloTask", "declare", "sub_task"]
