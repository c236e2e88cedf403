"""The one entry point: :func:`prepare_yolo_data` takes a YOLO ``data.yaml`` as it is, and
converts a COCO (:mod:`.coco`) or a Pascal VOC (:mod:`.voc`) set once into a cache folder of our
own (:mod:`.cache`, never next to the user's data), the labels written as the task's
:class:`~.labels.LabelKind` writes them.

A rerun with an unchanged source (the content of its annotation and list files, and where its
images are found) reuses the cache; a changed source, images moved away, or a conversion that
was killed (no marker), converts again. Boxes and points may pass the image's border by up to
one pixel (then clipped); more is an error.
"""
from __future__ import annotations

import os
from pathlib import Path

from ....errors import ConfigError
from ..data import read_data_yaml
from .cache import fingerprint as fingerprint_of, links_alive, locked, read_marker, write_cache, \
    writing
from .coco import plan_coco, read_coco
from .detect import FORMATS, detect_format
from .labels import LabelKind, label_kind
from .source import DataSource
from .voc import plan_voc, read_voc


def prepare_yolo_data(path: str | os.PathLike, *, data_format: str | None = None,
                      cache_dir: str | os.PathLike, task: str | LabelKind = "detect",
                      class_names: list[str] | None = None,
                      model_names: list[str] | None = None) -> DataSource:
    """The data at ``path`` as a YOLO data.yaml Ultralytics reads: a YOLO data.yaml as it is,
    a COCO or VOC set converted once into ``cache_dir`` (reused while the source is unchanged).

    data_format: ``"yolo"``, ``"coco"``, ``"voc"`` or None (detected). task: the label kind of
    the YOLO task the data are for (:class:`~.labels.LabelKind`), or its Ultralytics name:
    ``"detect"`` (boxes) or the name of another registered YOLO task that converts data
    (:func:`~.labels.known_kinds`). class_names: the VOC class order (else ``labels.txt``, else
    as first seen). model_names: the class names (in id order) of the model the data are used
    with (a checkpoint's): a COCO or VOC set's classes are mapped to them by name (each must be
    one of them); an empty list says the model's names are not known, and a VOC set without a
    class order (no ``class_names``, no ``labels.txt``) is then refused, naming the order it
    would take. Every problem of the source is a one-line ConfigError naming the file and the
    field or line.
    """
    kind = label_kind(task)
    if data_format is not None and data_format not in FORMATS:
        raise ConfigError(f"data_format={data_format!r} must be one of {', '.join(FORMATS)} (or "
                          f"None to detect it)")
    src = Path(path).expanduser()
    fmt = data_format or detect_format(src)
    if not src.exists():
        raise ConfigError(f"data path {src} does not exist: check the path")
    if fmt == "yolo":
        return _yolo_source(src)
    if class_names is not None and (not class_names or len(set(map(str, class_names)))
                                    != len(class_names)):
        raise ConfigError(f"class_names={class_names!r} must list distinct names")
    if fmt == "voc" and kind.boxes_only:
        raise ConfigError(f"{src} is a Pascal VOC set: its XML holds boxes only; "
                          f"{kind.boxes_only}")
    plan = plan_coco(src) if fmt == "coco" else plan_voc(src, class_names)
    order = [str(n) for n in model_names] if model_names else None
    if order is not None:
        plan.extra["class_names_from"] = "the model's names"
    elif model_names is not None and fmt == "voc" and class_names is None \
            and plan.splits["labels"] is None:
        seen = read_voc(plan, None)[0]
        raise ConfigError(f"{src} names no class order (no labels.txt, no class_names) and the "
                          f"model records no class names: its classes as first seen are "
                          f"{', '.join(seen[:8])}{', …' if len(seen) > 8 else ''}, which need "
                          f"not be the model's ids; write the model's class names in "
                          f"labels.txt (one a line, in id order) or pass class_names")
    cache = Path(cache_dir)
    with writing(cache):
        cache.mkdir(parents=True, exist_ok=True)
    fingerprint = fingerprint_of(plan, src, kind.task, order or class_names, cache)
    with locked(cache):
        done = read_marker(cache)
        if done is not None and done.get("fingerprint") == fingerprint \
                and (cache / "data.yaml").is_file() and links_alive(cache):
            return _source_of(cache, done["record"])
        names, splits = (read_coco(plan, kind, order) if fmt == "coco"
                         else read_voc(plan, order or class_names, order is not None))
        record = {"source": str(src), "format": fmt, "task": kind.task,
                  "names": {i: n for i, n in enumerate(names)},
                  "splits": {s: len(v if isinstance(v, list) else splits[v])
                             for s, v in splits.items()},
                  "shared": {s: v for s, v in splits.items() if isinstance(v, str)},
                  **plan.extra}
        write_cache(cache, names, splits, record, fingerprint)
    return _source_of(cache, record)


def _yolo_source(src: Path) -> DataSource:
    """A YOLO data.yaml (or the folder holding one) as it is."""
    data_yaml = src / "data.yaml" if src.is_dir() else src
    data = read_data_yaml(data_yaml, need_train=False)
    splits = {s: len(data[s]) for s in ("train", "val") if data.get(s)}
    record = {"source": str(src), "format": "yolo", "names": data["names"], "splits": splits}
    return DataSource(Path(data_yaml), "yolo", dict(data["names"]), splits, str(src), record)


def _source_of(cache: Path, record: dict) -> DataSource:
    """The converted data of ``cache`` with its record."""
    names = {int(k): str(v) for k, v in record["names"].items()}
    record = {**record, "names": names}  # JSON keys are strings: the same record either way
    return DataSource(cache / "data.yaml", record["format"], names, dict(record["splits"]),
                      record["source"], record)


__all__ = ["prepare_yolo_data"]
