"""A YOLO adapter's evaluation: the task's validator (Ultralytics', NMS without a time limit) on
the val split or its first ``eval_limit`` images, and autoprune's metric names for Ultralytics'
(``metrics/mAP50-95(B)`` -> ``map50_95``; a sub-task's own letter and name beside the box's)."""
from __future__ import annotations

import copy
import hashlib
import tempfile
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn as nn
import yaml

from ...engine.evaluated_copy import follow
from ...engine.fast_copy import fast_deepcopy
from ...engine.memory import available_bytes
from ...errors import ConfigError
from . import models as yolo
from .sources import EvalImages
from .training import ultralytics_device


RAM_BYTES = 1024 ** 3  # val images kept decoded (Ultralytics' cache="ram"): at most this many
RAM_SHARE = 0.1  # bytes, and this share of the memory available


def decoded_in_ram(images: int, size: int) -> bool:
    """True when ``images`` val images decoded at ``size`` px (at most ``size`` x ``size`` x 3
    bytes each) fit :data:`RAM_BYTES` and :data:`RAM_SHARE` of the memory available: the
    validator then decodes them once and keeps them (Ultralytics' ``cache="ram"``, the same
    metric), not on every pass (a tenth of a YOLO analysis point's time at 320 px: 3.29 -> 2.98 s
    an evaluation of 160 images). A larger val set (COCO's 5,000 at 640 px: 4.6 GB) is read from
    its files on every pass, as before; never Ultralytics' ``"disk"`` mode, which writes
    ``.npy`` files beside the user's images."""
    free = available_bytes()
    need = images * size * size * 3
    return free is not None and need <= min(RAM_BYTES, RAM_SHARE * free)


def evaluate(adapter: Any, model: nn.Module) -> dict[str, float]:
    """The adapter's metrics (:meth:`~.adapter.DetectionAdapter.metrics_of`) from its validator
    on the (limited) val split; the data loader is kept for the next call."""
    return adapter.metrics_of(validate(adapter, *validator_and_copy(adapter, model)))


def validator_and_copy(adapter: Any, model: nn.Module) -> tuple[Any, nn.Module]:
    """The adapter's validator for one evaluation of ``model`` and the fused float copy of
    ``model`` it validates (:func:`validate` runs them); an analysis running on ``model``
    evaluates the copy as it would ``model`` (:func:`~autoprune.engine.evaluated_copy.follow`:
    its prefix cache, its channels-last layout)."""
    if adapter.eval_data is None:
        raise ConfigError("evaluation needs data=<data.yaml> with a val split")
    net = fast_deepcopy(model).eval()
    if any(t.is_floating_point() and t.dtype != torch.float32
           for t in (*net.parameters(), *net.buffers())):
        net.float()  # as Ultralytics validates: float32 (its checkpoints hold half)
    net.fuse(verbose=False)  # on the copy: AutoBackend would fuse it (and print its FLOPs)
    follow(model, net)  # an analysis's prefix cache and layout apply to the copy it runs
    if not getattr(net, "names", None) or len(net.names) != yolo.model_nc(net):
        net.names = adapter.names
    args = {"data": str(val_data_yaml(adapter)), "imgsz": adapter.input_size,
            "batch": adapter.batch_size, "device": ultralytics_device(adapter.device),
            "plots": False, "verbose": False, "save_json": False,
            "workers": adapter.num_workers, "task": adapter.yolo_task, "split": "val",
            "rect": True}  # as Ultralytics validates (YOLO.val, the trainer)
    if adapter._loader is None and decoded_in_ram(len(adapter.eval_set), adapter.input_size):
        # (only the loader's first build reads it); deterministic: read by nothing in
        # validation but a warning that RAM caching may make *training* non-deterministic
        args.update(cache="ram", deterministic=False)
    with yolo.quiet(), yolo.one_process():
        validator = adapter.validator_class(dataloader=adapter._loader,
                                            save_dir=temp_folder(adapter), args=args)
    validator.given_a_copy = True  # net is this call's own copy: not copied again
    return validator, net


def validate(adapter: Any, validator: Any, net: nn.Module) -> dict[str, Any]:
    """Ultralytics' statistics from ``validator`` run on ``net`` (quiet, as one process under
    torchrun: each rank validates on its own); the data loader is kept for the next call. A
    pass stopped midway (an error, a Ctrl-C, the adaptive analysis's early stop) resets the
    loader: Ultralytics' keeps one iterator across passes, and the next would start mid-pass
    (with rect batches that moves the metric: mask mAP 0.01699 -> 0.01704 in a test)."""
    threads = torch.get_num_threads()
    try:
        with yolo.quiet(), yolo.one_process():
            stats = validator(model=net)
    except BaseException:
        loader = getattr(validator, "dataloader", None)
        if callable(getattr(loader, "reset", None)):
            loader.reset()
        raise
    finally:
        torch.set_num_threads(threads)
    adapter._loader = validator.dataloader
    return stats


def with_eval_limit(adapter: Any, limit: int) -> Any:
    """A copy of ``adapter`` validating on the first ``limit`` val images, with its own temp
    folder and loader."""
    subset = copy.copy(adapter)
    subset.eval_limit = min(limit, adapter.eval_limit or limit)
    subset.eval_set = EvalImages(adapter.eval_data["val"][:subset.eval_limit])
    subset._tmpdir, subset._val_yaml, subset._loader = None, None, None
    return subset


def temp_folder(adapter: Any) -> Path:
    """The adapter's private temp folder (validator outputs, the val subset), made once and
    removed with the adapter."""
    if adapter._tmpdir is None:
        adapter._tmpdir = tempfile.TemporaryDirectory(prefix="autoprune-yolo-")
    return Path(adapter._tmpdir.name)


def val_data_yaml(adapter: Any) -> Path:
    """The data.yaml the validator reads: the user's, or one listing the first eval_limit
    val images (written once, in the adapter's private temp folder) with the task's own keys."""
    if adapter.eval_limit is None or adapter.eval_limit >= len(adapter.eval_data["val"]):
        return adapter.eval_data["yaml"]
    if adapter._val_yaml is None:
        tmp = temp_folder(adapter)
        listing = tmp / "val_subset.txt"
        listing.write_text("".join(f"{p}\n" for p in adapter.eval_set))
        key = hashlib.sha256(listing.read_bytes()).hexdigest()[:8]
        adapter._val_yaml = tmp / f"data_{key}.yaml"
        own = {k: v for k, v in adapter.eval_data["cfg"].items()  # a sub-task's own keys
               if k not in ("path", "train", "val", "test", "names", "nc", "download")}
        adapter._val_yaml.write_text(yaml.safe_dump(
            {"path": str(tmp), "train": str(listing), "val": str(listing),
             "names": adapter.names, **own}, sort_keys=False))
    return adapter._val_yaml


def metrics_of(stats: dict[str, Any], sources: Sequence[tuple[str, str]]) -> dict[str, float]:
    """autoprune's metrics from Ultralytics' ``stats``: for each ``(name, letter)`` of
    ``sources``, ``map50_95_<name>`` and ``map50_<name>`` (``map50_95``, ``map50`` for an empty
    name) from ``metrics/mAP50-95(<letter>)`` and ``metrics/mAP50(<letter>)``."""
    out = {}
    for name, letter in sources:
        tail = f"_{name}" if name else ""
        out[f"map50_95{tail}"] = float(stats[f"metrics/mAP50-95({letter})"])
        out[f"map50{tail}"] = float(stats[f"metrics/mAP50({letter})"])
    return out


__all__ = ["evaluate", "metrics_of", "temp_folder", "validate", "validator_and_copy",
           "val_data_yaml", "with_eval_limit"]
