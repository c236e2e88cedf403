"""One-call detection pruning for Ultralytics YOLO (YOLOv8, YOLO11), PaddleX style.

Ultralytics trains and validates; mAP50-95 on the val split of a YOLO ``data.yaml`` is the metric.
Nothing is downloaded (build from YAML: ``"yolov8n.yaml"``)::

    from autoprune import detection as det
    # 1. train: out/baseline/best.pt (and out/baseline/ultralytics/, Ultralytics' run)
    base = det.train("yolov8n.yaml", "scenes/data.yaml", epochs=30, input_size=128,
                     save_dir="out")
    # 2. sensitivities of the trained model on (the first 50 images of) the val split
    det.analyze_sensitivity(base.baseline_path, "scenes/data.yaml", "out/sens.json", eval_limit=50)
    # 3. prune by a tolerated loss (or pruned_flops=0.4) and retrain: out/pruned/
    r = det.train(base.baseline_path, "scenes/data.yaml", epochs=30, input_size=128,
                  sensitivities_file="out/sens.json", eval_metric_loss=0.05, save_dir="out")
    model = det.load_model(r.pruned_path)  # or YOLO("out/pruned/ultralytics/weights/best.pt")

Each training stage (``<save_dir>/baseline``, ``<save_dir>/pruned``) keeps Ultralytics' own run
folder in ``<stage>/ultralytics`` (``weights/best.pt`` and ``last.pt`` load with ``YOLO(path)`` for
``predict`` / ``val`` / ``export``; resume an interrupted run with :func:`resume`); autoprune's
weights-only checkpoints are ``<stage>/best.pt`` and ``last.pt``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, NamedTuple

import torch
import torch.nn as nn

from ...engine.checkpoint import BASE_SHAPES, read_state_dict, save_pruned
from ...engine.distributed import barrier, init_from_env, rank_and_world
from ...errors import CheckpointError, ConfigError
from ...flow.api import make_analyze, make_load_model, make_train
from ...flow.checkpoints import checkpoint_meta, load_model as load_checkpoint_model
from ...flow.config import DEPRECATED as _RENAMED
from ...flow.contract import TrainResult
from ...flow.registry import get_task
from . import models as yolo
from .adapter import DetectionAdapter
from .stages import write_deployable
from .inputs import class_names

_TASK = get_task("detection")
DEPRECATED = tuple(_RENAMED)  # Ultralytics' names of three settings (left out of --help)

train = make_train(_TASK, """\
Train a YOLO detector with Ultralytics, and prune it when ``sensitivities_file`` is given.

model: ``"yolov8n.yaml"``, ``"yolo11s.yaml"`` (any of n/s/m/l/x; built untrained, nothing is
downloaded), a ``.pt`` checkpoint (autoprune's or Ultralytics' — the latter is a pickle: load
only files you trust), a ``YOLO`` object or a ``DetectionModel``. data: a YOLO data.yaml
(``train_data`` is an alias; ``eval_data``: another data.yaml whose val split is evaluated).

sensitivities_file: None -> plain training; an existing path -> use it (missing points are
measured); a new path -> measure and save there (resumable); "DEFAULT" -> the bundled profile.
Ratios come from ``eval_metric_loss`` (0.05 by default) or ``pruned_flops``, not both, or
``pruned_latency`` with ``latency_device`` / ``latency_threads`` / ``latency_batch`` (as in
``autoprune.classification.train``). A
model that is not trained yet (a YAML name, a module) is trained first for ``pretrain_epochs``
(default ``epochs``), then pruned and retrained for ``epochs``. ``eval_limit`` measures the
sensitivities (and every evaluation) on the first that many val images. ``train_args`` go to
Ultralytics' trainer as they are (``lr0``, ``optimizer``, ``mosaic``, ``nbs``, ``patience``...).
Outputs in ``save_dir``: ``baseline/`` (all that plain training writes), ``pruned/`` (each
with ``best.pt`` and an ``ultralytics/`` run), ``report.json|md|csv`` and ``sensitivity.png``.

resume: after an interruption, call again with ``resume=True`` (the other settings are read
back from ``save_dir/args.yaml``): a stage continues from its Ultralytics ``last.pt`` (the
pruned module itself), a finished stage is not trained again, and the sensitivity file keeps its
measured points.

distill: True retrains the pruned model distilling the unpruned one with Ultralytics' own
knowledge distillation (its ``DistillationModel``: the teacher's neck features, weighted by
its class scores, matched through a trained 1x1 projector; weight ``train_args={"dis": w}``,
Ultralytics' default 6.0). A mapping (classification's alpha and temperature) is refused.
prune_steps: as in :func:`autoprune.classification.train` (each step an Ultralytics run).

Under ``torchrun --nproc_per_node N`` (the CLI, or a script calling this) every stage trains
on all ranks with Ultralytics' trainer as DDP, each rank holding the pruned module itself;
``batch_size`` is the total over the ranks; rank 0 alone validates and writes; ``sync_bn``
normalises over all ranks' images (``SyncBatchNorm``, GPUs only; checkpoints keep
BatchNorm). ``device=[0, 1]`` / ``"0,1"`` from one process is refused with the torchrun
command to use instead.

input_size (default 640), batch_size (16), num_workers (0): the same names as the other
tasks; Ultralytics' ``imgsz``, ``batch`` and ``workers`` still work, with a FutureWarning.
""")

analyze_sensitivity = make_analyze(_TASK, "data", """Measure a trained detector's sensitivities
(relative mAP50-95 loss per group and ratio) on the val split of ``data`` into ``save_file``
(resumable; ``eval_limit``: first N val images, the number used is recorded in the file).

``model_or_checkpoint``: a checkpoint written by ``train`` (architecture, classes and input size
come from it), an Ultralytics .pt, a YOLO object, or a YAML name plus ``pretrain_weights``.""")

load_model = make_load_model(_TASK)


def export_onnx(model: nn.Module | str | os.PathLike, path: str | os.PathLike,
                input_size: int | None = None, opset_version: int = 17, *,
                dynamic_batch: bool = True, imgsz: int | None = None) -> Path:
    """Export a (pruned) detector or an autoprune checkpoint to ONNX: one output ``(batch, 4 + nc,
    anchors)`` as Ultralytics exports it (boxes xywh, class scores; NMS is left to the caller);
    any batch size unless ``dynamic_batch`` is False."""
    size = input_size if imgsz is None else _renamed_imgsz(imgsz, input_size)
    return export_with(DetectionAdapter, model, path, size, opset_version, dynamic_batch)


def export_with(adapter_class: type[DetectionAdapter], model: nn.Module | str | os.PathLike,
                path: str | os.PathLike, input_size: int | None = None,
                opset_version: int = 17, dynamic_batch: bool = True) -> Path:
    """:func:`export_onnx` for a task whose adapter is ``adapter_class`` (detection or a
    subclass): a module, or an autoprune checkpoint of the task (its input size unless given)."""
    if isinstance(model, (str, os.PathLike)):
        meta = checkpoint_meta(model)
        if meta.get("task") not in (None, adapter_class.task):
            raise CheckpointError(f"{model} is a {meta.get('task')} checkpoint, not "
                                  f"{adapter_class.task}: use autoprune.{meta.get('task')}"
                                  f".export_onnx")
        input_size = input_size or meta.get("input_size")
        model = load_checkpoint_model(model, adapter_class.for_checkpoint(meta, progress=False))
    adapter = adapter_class(input_size=input_size or 640)
    return adapter.export_onnx(model, Path(path), opset_version, dynamic_batch=dynamic_batch)


def resume(last: str | os.PathLike, progress: bool = True) -> nn.Module:
    """Finish an interrupted training stage from Ultralytics'
    ``<stage>/ultralytics/weights/last.pt`` (a stage: ``<save_dir>/baseline`` or
    ``<save_dir>/pruned``) — the pruned module itself resumes (not a rebuild from YAML) — and
    write autoprune's ``<stage>/best.pt`` / ``last.pt``. Returns the model holding the best
    weights. (The task API does the same with ``train(..., resume=True)``.)"""
    return resume_with(DetectionAdapter, last, progress)


def resume_with(adapter_class: type[DetectionAdapter], last: str | os.PathLike,
                progress: bool = True) -> nn.Module:
    """:func:`resume` for a task whose adapter is ``adapter_class`` (detection or a subclass)."""
    last = Path(last)
    if not last.is_file():
        raise CheckpointError(f"no checkpoint at {last}: pass "
                              f"<save_dir>/ultralytics/weights/last.pt")
    if (last.parent.name, last.parent.parent.name) != ("weights", "ultralytics"):
        raise CheckpointError(f"{last} is not <save_dir>/ultralytics/weights/last.pt of an "
                              f"autoprune run (resume writes <save_dir>/best.pt and last.pt): "
                              f"pass that file")
    try:
        wrapped = yolo.read_ultralytics(last)[0]
    except Exception:  # noqa: BLE001 - resume_training's own safe load names the problem
        wrapped = None
    if yolo.DistillationModel is not None and isinstance(wrapped, yolo.DistillationModel):
        raise ConfigError(f"{last} was distilling the unpruned model, which it does not hold: "
                          f"resume it with the call that started it plus resume=True (train(..., "
                          f"distill=True, resume=True) rebuilds the teacher)")
    init_from_env()  # under torchrun: every rank trains on (DDP), rank 0 writes
    device = {"device": str(torch.cuda.current_device())} \
        if rank_and_world()[1] > 1 and torch.cuda.is_available() else {}  # the rank's own GPU
    wrapper = yolo.resume_training(last, progress, adapter_class.trainer_class,
                                   check_labels=adapter_class.check_labels, **device)
    imgsz = wrapper.trainer.args.imgsz
    model = yolo.patch_model(wrapper.model.float()).eval()
    save_dir = last.parent.parent.parent
    adapter = adapter_class(num_classes=yolo.model_nc(model), input_size=imgsz,
                            class_names=class_names(model))
    derived = {"task": adapter.task, "arch": adapter.arch_of(model),
               "build": adapter.build_kwargs(model), "input_size": imgsz,
               "data": adapter.data_settings(), "pruned": hasattr(model, BASE_SHAPES)}
    for name, src in (("last.pt", last), ("best.pt", last.parent / "best.pt")):
        if src.is_file() and rank_and_world()[0] == 0:
            target = save_dir / name
            meta = checkpoint_meta(target) if target.is_file() else derived
            net, _ = yolo.read_ultralytics(src)
            save_pruned(yolo.patch_model(net), target, **{**meta, "resumed": True})
    write_deployable(save_dir)
    barrier()  # under torchrun: rank 0 has written best.pt, which the other ranks take
    if rank_and_world()[0] != 0 and (save_dir / "best.pt").is_file():
        model.load_state_dict(read_state_dict(save_dir / "best.pt"))
    return model


class SubTaskApi(NamedTuple):
    """A YOLO sub-task's public calls (:func:`sub_task_api`)."""

    train: Callable[..., TrainResult]
    analyze_sensitivity: Callable[..., Any]
    load_model: Callable[..., nn.Module]
    export_onnx: Callable[..., Path]
    resume: Callable[..., nn.Module]


RESUME_DOC = """\
Finish an interrupted training stage from Ultralytics' ``<stage>/ultralytics/weights/
last.pt``, as :func:`autoprune.detection.resume` does for detection."""


def sub_task_api(adapter_class: type[DetectionAdapter], module: str, *, train: str,
                 analyze: str, export: str) -> SubTaskApi:
    """The public calls of the YOLO sub-task whose adapter is ``adapter_class``, shown as
    ``module``'s (its API module: ``help``, the typed stubs): ``train`` and
    ``analyze_sensitivity`` built from its settings (:mod:`autoprune.flow.api`; ``train`` and
    ``analyze`` are their docstrings), ``load_model``, and detection's ``export_onnx`` (``export``:
    its docstring, the task's ONNX outputs) and ``resume`` for that adapter."""
    task = get_task(adapter_class.task)

    def export_onnx(model: nn.Module | str | os.PathLike, path: str | os.PathLike,
                    input_size: int | None = None, opset_version: int = 17, *,
                    dynamic_batch: bool = True) -> Path:
        return export_with(adapter_class, model, path, input_size, opset_version, dynamic_batch)

    def resume(last: str | os.PathLike, progress: bool = True) -> nn.Module:
        return resume_with(adapter_class, last, progress)

    for function, doc in ((export_onnx, export), (resume, RESUME_DOC)):
        function.__doc__, function.__module__ = doc, module
        function.__qualname__ = function.__name__
    return SubTaskApi(make_train(task, train), make_analyze(task, "data", analyze),
                      make_load_model(task), export_onnx, resume)


def _renamed_imgsz(imgsz: int, input_size: int | None) -> int:
    """``imgsz`` (Ultralytics' name, deprecated) as ``input_size``."""
    import warnings

    if input_size is not None and input_size != imgsz:
        raise ConfigError(f"imgsz={imgsz} and input_size={input_size} name the same setting: "
                          f"pass input_size= only")
    warnings.warn("imgsz= is deprecated: use input_size= (autoprune's name in every task)",
                  FutureWarning, stacklevel=3)
    return imgsz


__all__ = ["DEPRECATED", "TrainResult", "analyze_sensitivity", "export_onnx", "load_model",
           "resume", "train"]
