"""A YOLO adapter's data: the data and eval data given to it read as YOLO data.yaml files (COCO /
VOC sets converted once by :mod:`.formats`, never next to the user's data), their classes
checked against the model's, and the data described in one line."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Sequence

from ...errors import ConfigError
from . import formats
from .data import read_data_yaml


class EvalImages(list):
    """The validation images evaluated (its ``len`` is recorded in sensitivity files)."""


def read_data(adapter: Any, model_names: Sequence[str] | None) -> None:
    """Read into ``adapter`` (converting COCO / VOC once) the data and eval data given to its
    constructor, their classes mapped to ``model_names`` (see its ``class_names``)."""
    data, eval_data, data_format, cache_root, nc = adapter._given
    data = as_yolo(adapter, "data", data, data_format, cache_root, model_names)
    eval_data = as_yolo(adapter, "eval_data", eval_data, data_format, cache_root, model_names)
    adapter.data = read_data_yaml(data, check_labels=adapter.check_labels) \
        if data is not None else None
    adapter.eval_data = adapter.data if eval_data is None or (
        data is not None and Path(eval_data).resolve() == Path(data).resolve()) \
        else read_data_yaml(eval_data, need_train=False, check_labels=adapter.check_labels)
    if adapter.data and adapter.eval_data \
            and adapter.data["names"] != adapter.eval_data["names"]:
        raise ConfigError(f"{adapter.data['yaml']} and {adapter.eval_data['yaml']} name "
                          f"different classes: use the same 'names:' in both")
    found = (adapter.data or adapter.eval_data or {}).get("nc")
    if nc is not None and found is not None and nc != found:
        raise ConfigError(f"num_classes={nc} but the data has {found} classes: pass "
                          f"num_classes={found} or omit it")
    adapter.num_classes = nc if nc is not None else found
    # the data's class names, else a checkpoint's (class_names: read back from its metadata)
    adapter.names = (adapter.data or adapter.eval_data or {}).get("names") or \
        (dict(enumerate(map(str, model_names))) if model_names else None)
    adapter.eval_set = None
    if adapter.eval_data is not None:
        adapter.eval_set = EvalImages(adapter.eval_data["val"][:adapter.eval_limit])
    check_names(adapter.data or adapter.eval_data, model_names)


def check_names(data: dict[str, Any] | None, model_names: Sequence[str] | None) -> None:
    """Refuse data whose class names (YOLO's, in its order) are not the model's."""
    if not model_names or data is None:
        return
    mine = [str(data["names"][i]) for i in sorted(data["names"])]
    theirs = [str(n) for n in model_names]
    if mine != theirs and len(mine) == len(theirs):  # (another count is named elsewhere)
        same = "the same classes in another order" if sorted(mine) == sorted(theirs) \
            else "other classes"
        raise ConfigError(f"the model was trained on {same} ({', '.join(theirs[:6])}"
                          f"{', …' if len(theirs) > 6 else ''}) than {data['yaml']} names "
                          f"({', '.join(mine[:6])}{', …' if len(mine) > 6 else ''}): their "
                          f"ids would be evaluated one for one; list the model's names in "
                          f"that order in the data.yaml (and its labels), or pass the data "
                          f"as COCO / VOC to have it mapped by name")


def as_yolo(adapter: Any, key: str, path: Any, data_format: str | None,
            cache_root: str | os.PathLike | None,
            model_names: Sequence[str] | None = None) -> Any:
    """The YOLO data.yaml of ``path``: itself, or a COCO / VOC set converted once (as the
    adapter's ``labels`` write it) into a cache under ``cache_root`` (the run's save_dir; a temp
    folder without one), never next to the user's data, its classes mapped to ``model_names``;
    the conversion is kept in ``adapter.sources[key]``."""
    if path is None:
        return None
    labels = adapter.labels
    if data_format not in (None, "yolo") and labels is None:
        raise ConfigError(f"data_format={data_format!r}: {adapter.task} reads YOLO data.yaml "
                          f"files only; convert the data to YOLO labels")
    if labels is None or not Path(path).exists() or (
            data_format in (None, "yolo") and formats.detect_format(path) == "yolo"):
        return path  # read_data_yaml names a missing file
    root = Path(cache_root) if cache_root is not None else \
        Path(tempfile.gettempdir()) / f"autoprune-data-{os.getuid()}"
    source = formats.prepare_yolo_data(
        path, data_format=data_format, task=labels,
        cache_dir=formats.cache_dir_for(root, path, labels.task),
        model_names=None if model_names is None else [str(n) for n in model_names])
    adapter.sources[key] = source
    return source.yaml


def describe_data(adapter: Any) -> str:
    """``coco, 2 splits, 80 classes, 5,000 val images`` (a YOLO data.yaml: its split sizes)."""
    if "data" in adapter.sources or "eval_data" in adapter.sources:
        return "; ".join(source.describe() for source in adapter.sources.values())
    data, eval_data = adapter.data, adapter.eval_data
    sizes = [f"{len(data[s]):,} {s}" for s in ("train", "val") if data and data.get(s)]
    if eval_data is not None and eval_data is not data:
        sizes.append(f"{len(eval_data['val']):,} val (eval_data)")
    return f"yolo, {adapter.num_classes} classes, {' + '.join(sizes)} images"


__all__ = ["EvalImages", "as_yolo", "check_names", "describe_data", "read_data"]
