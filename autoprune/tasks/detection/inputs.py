"""What a user passes as an Ultralytics model, turned into what the flow takes: a YAML name, an
autoprune checkpoint, an Ultralytics ``.pt`` (loaded through its allow-list), a ``YOLO`` object
or a module."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch.nn as nn

from ...engine.checkpoint import BASE_SHAPES, save_pruned
from ...engine.distributed import barrier, rank_and_world
from ...engine.provenance import file_provenance
from ...errors import ConfigError, NotAutopruneCheckpointError
from ...flow.checkpoints import checkpoint_meta
from . import models as yolo
from .pretrained import adapt_to_classes, load_pretrained


def is_checkpoint_file(x: Any) -> bool:
    """A path of an existing ``.pt`` file."""
    return isinstance(x, (str, os.PathLike)) and str(x).lower().endswith(".pt") \
        and Path(x).is_file()


def autoprune_meta(path: str | os.PathLike) -> dict[str, Any] | None:
    """The metadata of an autoprune checkpoint, or None for another kind of .pt file."""
    try:
        return checkpoint_meta(path)
    except NotAutopruneCheckpointError:
        return None


def as_module(model: Any) -> tuple[nn.Module | None, bool]:
    """(module, trained) for a YOLO object, Ultralytics weights (a local .pt, or an asset name
    such as ``yolov8n.pt`` found in Ultralytics' weights dir or fetched there) or a module;
    (None, _) for a name or an autoprune checkpoint."""
    module, start = as_module_from(model)
    return module, _trained(model, start)


def _trained(model: Any, start: dict[str, Any] | None) -> bool:
    """Whether what the user passed holds trained weights (a file, or a YOLO object loaded
    from one)."""
    return start is not None or (isinstance(model, yolo.YOLOModel) and bool(model.ckpt))


def as_module_from(model: Any) -> tuple[nn.Module | None, dict[str, Any] | None]:
    """(module, where its weights came from) for what :func:`as_module` takes."""
    if isinstance(model, yolo.YOLOModel):  # a YOLO object (itself an nn.Module): its model
        if not isinstance(model.model, nn.Module):
            raise ConfigError(f"the YOLO object holds no model ({model.model!r})")
        path = getattr(model, "ckpt_path", None)
        start = file_provenance(path, "ultralytics").to_dict() \
            if model.ckpt and path and Path(path).is_file() else None
        return yolo.patch_model(model.model.float()), start
    if isinstance(model, nn.Module):
        return model, None
    if isinstance(model, (str, os.PathLike)) and str(model).lower().endswith(".pt"):
        if Path(model).is_file() and autoprune_meta(model) is not None:
            return None, None  # an autoprune checkpoint: read by the flow
        module, provenance = load_pretrained(model)  # the allow-list loader; a missing file
        return yolo.patch_model(module), provenance.to_dict()  # or asset: one line
    return None, None


def prepare(adapter: Any, model: Any, pretrain_weights: Any, save_dir: Path) -> tuple[Any, Any]:
    """Turn ``model`` into what the flow takes: an architecture name (with its weights as
    ``pretrain_weights`` when trained on the data's classes), or a module: of unknown
    architecture, or trained on other classes (``yolov8n.pt`` from COCO), its head then adapted
    to the data's classes as Ultralytics' trainer adapts it, to be fine-tuned first."""
    module, start = as_module_from(model)
    trained = module is not None and _trained(model, start)
    adapter.loaded_weights(start)
    if trained and adapter.num_classes is not None and (
            yolo.model_nc(module) != adapter.num_classes
            or _other_names(class_names(module), adapter)):
        return adapted(adapter, module, model, pretrain_weights), None
    if module is None and is_checkpoint_file(model):  # an autoprune checkpoint: arch + weights
        if pretrain_weights is not None:
            raise ConfigError(f"model is already a checkpoint ({model}): leave pretrain_weights "
                              f"unset")
        meta = checkpoint_meta(model)
        if meta.get("task") != adapter.task or not meta.get("arch"):
            raise ConfigError(f"{model} is not a {adapter.task} checkpoint of a named YOLO model: "
                              f"pass a YAML name such as 'yolov8n.yaml'")
        build = meta.get("build", {})
        classes = build.get("num_classes", build.get("nc"))
        if adapter.num_classes is not None and classes != adapter.num_classes:
            raise ConfigError(f"the model predicts {classes} classes but the data has "
                              f"{adapter.num_classes}: use data with {classes} classes or train "
                              f"a new model on this data")
        theirs = (meta.get("data") or {}).get("class_names")
        if isinstance(theirs, list) and _other_names(theirs, adapter):
            raise ConfigError(f"{model} was trained on other classes ({_few(theirs)}) than the "
                              f"data's ({_few(_data_names(adapter))}): list the model's names in "
                              f"that order in data.yaml, or start from the model it was trained "
                              f"from to fine-tune it on these classes")
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
    start = Path(save_dir) / "start_weights.pt"  # its weights, loadable into a fresh build
    if rank_and_world()[0] == 0:
        save_pruned(module, start, task=adapter.task, arch=arch,
                    build=adapter.build_kwargs(module), input_size=adapter.input_size,
                    pruned=hasattr(module, BASE_SHAPES))
    barrier()  # under torchrun: rank 0 has written it
    return arch, start


def adapted(adapter: Any, module: nn.Module, given: Any, pretrain_weights: Any) -> nn.Module:
    """A pretrained ``module`` of other classes with its head made for the data's: tensors of
    matching name and shape transferred, the class outputs fresh; it is fine-tuned first."""
    if pretrain_weights is not None:
        raise ConfigError(f"model {given} brings its own weights: leave pretrain_weights unset")
    before, theirs = yolo.model_nc(module), class_names(module)
    model, transferred, total = adapt_to_classes(module, adapter.num_classes, adapter.names,
                                                 keep_head_width=False)
    if rank_and_world()[0] == 0:
        what = f"{before} classes, the data has {adapter.num_classes}" \
            if before != adapter.num_classes else \
            f"trained on {_few(theirs)}, the data has {_few(_data_names(adapter))}"
        print(f"[autoprune] {getattr(given, 'ckpt_path', None) or given}: {what}: "
              f"{transferred}/{total} tensors transferred, the class outputs "
              f"{'are new' if before != adapter.num_classes else 'start from its own'}; the "
              f"model is fine-tuned before it is pruned", flush=True)
    return yolo.patch_model(model).eval()


def class_names(module: nn.Module) -> list[str] | None:
    """A model's class names in id order; None when it holds none or only the placeholder
    names ("0", "1", ...) of a model built without data."""
    names = getattr(module, "names", None)
    if isinstance(names, (list, tuple)):
        names = dict(enumerate(names))
    if not isinstance(names, dict) or not names:
        return None
    try:
        listed = [str(names[k]) for k in sorted(names)]
    except TypeError:  # ids of mixed types: not a name table
        return None
    return None if listed == [str(i) for i in range(len(listed))] else listed


def _data_names(adapter: Any) -> list[str]:
    """The data's class names in id order (as its checkpoints keep them)."""
    return adapter.data_settings().get("class_names", [])


def _other_names(names: list[str] | None, adapter: Any) -> bool:
    """Whether a model's known class names differ from the data's (the same count assumed)."""
    mine = _data_names(adapter)
    return bool(names) and bool(mine) and [str(n) for n in names] != mine


def _few(names: list[str] | None, shown: int = 3) -> str:
    """``person, bicycle, car, … (80)``."""
    names = [str(n) for n in names or []]
    more = f", … ({len(names)})" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
