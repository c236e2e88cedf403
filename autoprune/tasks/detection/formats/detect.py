"""Which data format a path holds: a YOLO ``data.yaml``, a COCO root or JSON file, or a Pascal
VOC root or PaddleX VOC list."""
from __future__ import annotations

import os
from pathlib import Path

from ....errors import ConfigError
from .coco import coco_jsons
from .paddlex import is_voc_list, paddlex_voc_lists

FORMATS = ("yolo", "coco", "voc")


def detect_format(path: str | os.PathLike) -> str:
    """``"yolo"``, ``"coco"`` or ``"voc"`` from what ``path`` holds; a one-line ConfigError when
    it is none of them."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"data path {p} does not exist: pass a YOLO data.yaml, a COCO root or "
                          f"JSON file, or a Pascal VOC root")
    if p.is_file():
        if p.suffix.lower() in (".yaml", ".yml"):
            return "yolo"
        if p.suffix.lower() == ".json":
            return "coco"
        if p.suffix.lower() == ".txt" and is_voc_list(p):
            return "voc"
    else:
        if (p / "data.yaml").is_file():
            return "yolo"
        if coco_jsons(p):
            return "coco"
        if (p / "Annotations").is_dir() and ((p / "ImageSets" / "Main").is_dir()
                                             or paddlex_voc_lists(p)):
            return "voc"
    raise ConfigError(f"cannot tell the data format of {p}: pass a YOLO data.yaml, a COCO root "
                      f"(annotations/instances_<split>.json) or JSON file, or a Pascal VOC root "
                      f"(Annotations/, JPEGImages/, ImageSets/Main/*.txt), or name it with "
                      f"data_format='yolo'|'coco'|'voc'")


__all__ = ["FORMATS", "detect_format"]
