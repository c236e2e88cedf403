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
from ...errors import ConfigError, NotAutopruneCheckpointError
from ...flow.checkpoints import checkpoint_meta
from . import models as yolo


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
        if autoprune_meta(model) is None:  # an Ultralytics checkpoint (a pickle: your own file)
            return yolo.load_ultralytics(model), True
    return None, False


def prepare(adapter: Any, model: Any, pretrain_weights: Any, save_dir: Path) -> tuple[Any, Any]:
    """Turn ``model`` into what the flow takes: an architecture name (with its weights as
    ``pretrain_weights`` when trained) or a module of unknown architecture."""
    module, trained = as_module(model)
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
