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
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch
import torch.nn as nn

from ...flow import checkpoints, run
from ...flow.checkpoints import checkpoint_meta
from ...flow.options import check_save_dir
from ...engine.checkpoint import BASE_SHAPES, read_state_dict, save_pruned
from ...engine.distributed import barrier, init_from_env, rank_and_world
from ...errors import CheckpointError, ConfigError, NotAutopruneCheckpointError
from ...engine.sensitivity import DEFAULT_RATIOS
from . import models as yolo
from ..base import TrainResult
from .adapter import DetectionAdapter
from .stages import write_deployable


def _is_file(x: Any) -> bool:
    return isinstance(x, (str, os.PathLike)) and str(x).lower().endswith(".pt") \
        and Path(x).is_file()


def _autoprune_meta(path: str | os.PathLike) -> dict[str, Any] | None:
    """The metadata of an autoprune checkpoint, or None for another kind of .pt file."""
    try:
        return checkpoint_meta(path)
    except NotAutopruneCheckpointError:
        return None


def _as_module(model: Any) -> tuple[nn.Module | None, bool]:
    """(module, trained) for a YOLO object, an Ultralytics .pt file or a module; (None, _) for a
    name or an autoprune checkpoint."""
    if isinstance(model, yolo.YOLOModel):  # a YOLO object (itself an nn.Module): its model
        if not isinstance(model.model, nn.Module):
            raise ConfigError(f"the YOLO object holds no model ({model.model!r})")
        return yolo.patch_model(model.model.float()), bool(model.ckpt)
    if isinstance(model, nn.Module):
        return model, False
    if isinstance(model, (str, os.PathLike)) and str(model).lower().endswith(".pt"):
        if not Path(model).is_file():
            raise ConfigError(f"no checkpoint at {model}: nothing is downloaded; pass a local .pt "
                              f"or build from YAML, e.g. 'yolov8n.yaml'")
        if _autoprune_meta(model) is None:  # an Ultralytics checkpoint (a pickle: your own file)
            return yolo.load_ultralytics(model), True
    return None, False


def _prepare(adapter: DetectionAdapter, model: Any, pretrain_weights: Any,
             save_dir: Path) -> tuple[Any, Any]:
    """Turn ``model`` into what the pipeline takes: an architecture name (with its weights as
    ``pretrain_weights`` when trained) or a module of unknown architecture."""
    module, trained = _as_module(model)
    if module is None and _is_file(model):  # an autoprune checkpoint: its arch + its weights
        if pretrain_weights is not None:
            raise ConfigError(f"model is already a checkpoint ({model}): leave pretrain_weights "
                              f"unset")
        meta = checkpoint_meta(model)
        if meta.get("task") != adapter.task or not meta.get("arch"):
            raise ConfigError(f"{model} is not a {adapter.task} checkpoint of a named YOLO model: "
                              f"pass a YAML name such as 'yolov8n.yaml'")
        nc = meta.get("build", {}).get("nc")
        if adapter.nc is not None and nc != adapter.nc:
            raise ConfigError(f"the model predicts {nc} classes but the data has {adapter.nc}: "
                              f"use data with {nc} classes or train a new model on this data")
        return meta["arch"], model
    if module is None:
        return model, pretrain_weights
    arch = adapter.arch_of(module)
    if arch is not None and not trained and isinstance(model, yolo.YOLOModel):
        return arch, pretrain_weights  # YOLO("yolov8n.yaml"): untrained, built for the data's nc
    adapter.check_model(module)
    if arch is None or not trained:
        return module, pretrain_weights
    if pretrain_weights is not None:
        raise ConfigError("model is already a trained YOLO model: leave pretrain_weights unset")
    start = save_dir / "start_weights.pt"  # its weights, loadable into a fresh build of arch
    if rank_and_world()[0] == 0:
        save_pruned(module, start, task=adapter.task, arch=arch,
                    build=adapter.build_kwargs(module), input_size=adapter.input_size,
                    pruned=hasattr(module, BASE_SHAPES))
    barrier()  # under torchrun: rank 0 has written it
    return arch, start


# Ultralytics' names of three settings, accepted for one release beside autoprune's own
_ULTRALYTICS_NAMES = {"imgsz": "input_size", "batch": "batch_size", "workers": "num_workers"}
DEPRECATED = tuple(_ULTRALYTICS_NAMES)  # left out of `autoprune train --help`


def _settings(given: dict[str, Any], old: dict[str, Any],
              defaults: dict[str, Any]) -> dict[str, Any]:
    """autoprune's names for input size, batch size and loader workers, from ``given`` (its own
    names) or ``old`` (Ultralytics' ``imgsz``, ``batch``, ``workers``: a DeprecationWarning)."""
    out = dict(given)
    for old_name, value in old.items():
        if value is None:
            continue
        new_name = _ULTRALYTICS_NAMES[old_name]
        if given.get(new_name) is not None and given[new_name] != value:
            raise ConfigError(f"{old_name}={value} and {new_name}={given[new_name]} name the same "
                              f"setting: pass {new_name}= only")
        warnings.warn(f"{old_name}= is deprecated: use {new_name}= (autoprune's name in every "
                      f"task)", DeprecationWarning, stacklevel=3)
        out[new_name] = value
    return {k: defaults[k] if out.get(k) is None else out[k] for k in defaults}


def train(model: str | nn.Module | Any, data: str | os.PathLike | None = None, *,
          epochs: int = 100, input_size: int | None = None, batch_size: int | None = None,
          pretrain_weights: str | os.PathLike | None = None,
          sensitivities_file: str | os.PathLike | None = None,
          eval_metric_loss: float | None = None, pruned_flops: float | None = None,
          pruned_latency: float | None = None, latency_device: str = "cpu",
          latency_threads: int | None = None, latency_batch: int = 1,
          save_dir: str | os.PathLike = "output",
          device: str = "auto", eval_data: str | os.PathLike | None = None,
          pretrain_epochs: int | None = None, criterion: str = "l1_norm",
          round_to: int | None = None, ratios: Iterable[float] = DEFAULT_RATIOS,
          eval_limit: int | None = None, num_workers: int | None = None,
          train_args: dict[str, Any] | None = None, seed: int = 0, progress: bool = True,
          sensitivity_options: Mapping[str, Any] | None = None,
          train_data: str | os.PathLike | None = None, resume: bool = False,
          distill: bool | dict[str, float] = False, prune_steps: int = 1,
          sync_bn: bool = False, imgsz: int | None = None, batch: int | None = None,
          workers: int | None = None) -> TrainResult:
    """Train a YOLO detector with Ultralytics, and prune it when ``sensitivities_file`` is given.

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

    resume: after an interruption, call again with the same arguments and ``resume=True``: a
    stage continues from its Ultralytics ``last.pt`` (the pruned module itself), a finished stage
    is not trained again, and the sensitivity file keeps its measured points.

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
    tasks; Ultralytics' ``imgsz``, ``batch`` and ``workers`` still work, with a DeprecationWarning.
    """
    return train_with(DetectionAdapter, locals())


def train_with(adapter_class: type[DetectionAdapter], arguments: Mapping[str, Any]) -> TrainResult:
    """:func:`train` for a task whose adapter is ``adapter_class`` (detection or a subclass),
    from the ``arguments`` of its ``train`` (its ``locals()``)."""
    a = dict(arguments)
    s = _settings(dict(input_size=a["input_size"], batch_size=a["batch_size"],
                       num_workers=a["num_workers"]),
                  dict(imgsz=a.get("imgsz"), batch=a.get("batch"), workers=a.get("workers")),
                  dict(input_size=640, batch_size=16, num_workers=0))
    if a["train_data"] is not None:
        if a["data"] is not None and Path(a["data"]) != Path(a["train_data"]):
            raise ConfigError("pass the data.yaml once: data= or train_data=, not both")
        a["data"] = a["train_data"]
    adapter_class.check_distill(a["distill"], a["train_args"])  # before any data is read
    if a["data"] is None:
        raise ConfigError("data=<path to a YOLO data.yaml> is required")
    init_from_env()  # under torchrun (a script, or the CLI): DDP training, the analysis shared
    torch.manual_seed(a["seed"])
    adapter = adapter_class(a["data"], a["eval_data"], input_size=s["input_size"],
                            batch_size=s["batch_size"], eval_limit=a["eval_limit"],
                            device=a["device"], workers=s["num_workers"],
                            train_args=a["train_args"], seed=a["seed"], progress=a["progress"],
                            sync_bn=a["sync_bn"])
    a["save_dir"] = check_save_dir(a["save_dir"])
    model, a["pretrain_weights"] = _prepare(adapter, a["model"], a["pretrain_weights"],
                                            a["save_dir"])
    return run.train(adapter, model, **run.flow_settings(a))


def analyze_sensitivity(model_or_checkpoint: str | os.PathLike | nn.Module | Any,
                        data: str | os.PathLike, save_file: str | os.PathLike, *,
                        pretrain_weights: str | os.PathLike | None = None,
                        input_size: int | None = None, batch_size: int | None = None,
                        device: str = "auto", criterion: str = "l1_norm",
                        ratios: Iterable[float] = DEFAULT_RATIOS,
                        eval_limit: int | None = None, num_workers: int | None = None,
                        progress: bool = True,
                        sensitivity_options: Mapping[str, Any] | None = None,
                        imgsz: int | None = None, batch: int | None = None,
                        workers: int | None = None) -> dict[str, dict[float, float]]:
    """Measure a trained detector's sensitivities (relative mAP50-95 loss per group and ratio) on
    the val split of ``data`` into ``save_file`` (resumable; ``eval_limit``: first N val images,
    the number used is recorded in the file).

    ``model_or_checkpoint``: a checkpoint written by ``train`` (architecture, classes and imgsz
    come from it), an Ultralytics .pt, a YOLO object, or a YAML name plus ``pretrain_weights``.
    ``imgsz``, ``batch``, ``workers``: Ultralytics' names, deprecated (as in :func:`train`).
    """
    return analyze_with(DetectionAdapter, locals())


def analyze_with(adapter_class: type[DetectionAdapter],
                 a: Mapping[str, Any]) -> dict[str, dict[float, float]]:
    """:func:`analyze_sensitivity` for a task whose adapter is ``adapter_class``, from the
    arguments ``a`` of its ``analyze_sensitivity`` (its ``locals()``)."""
    s = _settings(dict(input_size=a["input_size"], batch_size=a["batch_size"],
                       num_workers=a["num_workers"]),
                  dict(imgsz=a.get("imgsz"), batch=a.get("batch"), workers=a.get("workers")),
                  dict(input_size=None, batch_size=16, num_workers=0))
    model = a["model_or_checkpoint"]
    meta = _autoprune_meta(model) if _is_file(model) else None
    if meta is not None:
        s["input_size"] = s["input_size"] or meta.get("input_size")
    adapter = adapter_class(None, a["data"], input_size=s["input_size"],
                            batch_size=s["batch_size"], eval_limit=a["eval_limit"],
                            device=a["device"], workers=s["num_workers"], progress=a["progress"])
    if meta is None:
        module, _ = _as_module(model)
        if module is not None:
            adapter.check_model(module)
            model = module
    else:
        adapter.check_model(checkpoints.load_model(model, adapter_class()))
    return run.analyze_sensitivity(adapter, model, a["save_file"],
                                   pretrain_weights=a["pretrain_weights"],
                                   criterion=a["criterion"], ratios=a["ratios"],
                                   progress=a["progress"],
                                   sensitivity_options=a["sensitivity_options"])


def load_model(path: str | os.PathLike, base_model: nn.Module | None = None) -> nn.Module:
    """Load a checkpoint written by ``train`` (pruned or not), weights-only, in eval mode: a patched
    Ultralytics ``DetectionModel`` (``model(x)`` gives Ultralytics' raw predictions)."""
    return checkpoints.load_model(path, DetectionAdapter(), base_model=base_model)


def export_onnx(model: nn.Module | str | os.PathLike, path: str | os.PathLike,
                input_size: int | None = None, opset_version: int = 17, *,
                dynamic_batch: bool = True, imgsz: int | None = None) -> Path:
    """Export a (pruned) detector or an autoprune checkpoint to ONNX: one output ``(batch, 4 + nc,
    anchors)`` as Ultralytics exports it (boxes xywh, class scores; NMS is left to the caller);
    any batch size unless ``dynamic_batch`` is False."""
    size = _settings(dict(input_size=input_size), dict(imgsz=imgsz),
                     dict(input_size=None))["input_size"]
    if isinstance(model, (str, os.PathLike)):
        size = size or checkpoint_meta(model).get("input_size")
        model = load_model(model)
    return DetectionAdapter(input_size=size or 640).export_onnx(model, Path(path), opset_version,
                                                                dynamic_batch=dynamic_batch)


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
    wrapper = yolo.resume_training(last, progress, adapter_class.trainer_class, **device)
    imgsz = wrapper.trainer.args.imgsz
    model = yolo.patch_model(wrapper.model.float()).eval()
    save_dir = last.parent.parent.parent
    adapter = adapter_class(nc=yolo.model_nc(model), input_size=imgsz)
    derived = {"task": adapter.task, "arch": adapter.arch_of(model),
               "build": adapter.build_kwargs(model), "input_size": imgsz,
               "pruned": hasattr(model, BASE_SHAPES)}
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


__all__ = ["TrainResult", "analyze_sensitivity", "export_onnx", "load_model", "resume", "train"]
