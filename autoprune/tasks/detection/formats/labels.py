"""YOLO label lines and the label kinds a conversion writes: a box line ``class cx cy bw bh``
checked against its image, the names images get in the cache, and :class:`LabelKind`, how one
Ultralytics task writes the line of a COCO object.

Detection's kind (:data:`BOXES`) is the only one defined here: a YOLO task that trains on other
lines declares its own kind on its adapter (``labels``), and a conversion asked for that task by
name finds it through the task registry (:func:`label_kind`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ....errors import ConfigError
from .source import LabelledImage

TOLERANCE = 1.0      # pixels a box or point may pass the image border (then clipped)

# the line of one COCO object: (class id, annotation, box x0 y0 x1 y1 in pixels, image width,
# image height, where it is for errors, the record's counts) -> its label line
ObjectLine = Callable[[int, dict, tuple[float, float, float, float], float, float, str, dict], str]


@dataclass(frozen=True)
class LabelKind:
    """The label lines one Ultralytics task trains on, as a conversion writes them.

    task: Ultralytics' name of the task (the cache's key, recorded with the data). what: its
    labels in words, for messages. object_line: the line of a COCO object whose box has an area
    (None: the box line). boxes_only: why a set that holds boxes only (Pascal VOC) cannot serve
    the task, in a few words naming what can ("" where boxes serve)."""

    task: str
    what: str
    object_line: ObjectLine | None = None
    boxes_only: str = ""


BOXES = LabelKind("detect", "boxes")  # detection: a box per object


def label_kind(task: str | LabelKind) -> LabelKind:
    """``task`` as a label kind: itself, or the kind of the YOLO task of that Ultralytics name
    (:func:`known_kinds`); a one-line ConfigError naming the kinds there are otherwise."""
    if isinstance(task, LabelKind):
        return task
    if task == BOXES.task:
        return BOXES
    kinds = known_kinds()
    if task not in kinds:
        raise ConfigError(f"task={task!r} must be " + " or ".join(
            f"{k.task!r} ({k.what})" for k in kinds.values()))
    return kinds[task]


def known_kinds() -> dict[str, LabelKind]:
    """The label kinds of the registered YOLO tasks (those of YOLO settings), by Ultralytics'
    task name: detection's boxes, and each other task's adapter's ``labels`` (None: a task that
    reads YOLO data only). Imports those tasks' adapters."""
    from ....flow.registry import TASKS
    from ..settings import YoloSettings

    kinds = {BOXES.task: BOXES}
    for task in list(TASKS.values()):
        if task.settings and issubclass(task.settings_class(), YoloSettings):
            kind = getattr(task.adapter_class(), "labels", None)
            if kind is not None:
                kinds.setdefault(kind.task, kind)
    return kinds


def safe_name(name: str) -> str:
    """An image's name under ``images/<split>/``: its relative path, or its file name when the
    path is absolute or climbs out (``..``)."""
    p = Path(str(name).replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or not p.parts:
        return p.name
    return p.as_posix()


def check_unique(images: list[LabelledImage], where: str) -> None:
    """Refuse two images whose labels would be one file (names equal but for the suffix)."""
    seen: dict[str, str] = {}
    for im in images:
        key = str(Path(im.name).with_suffix("")).lower()
        if key in seen:
            raise ConfigError(f"{where}: images {seen[key]!r} and {im.name!r} share a name (their "
                              f"labels would be one file): rename one of them")
        seen[key] = im.name


def box_line(c: int, box: tuple[float, float, float, float], w: float, h: float,
             where: str) -> str:
    """``class cx cy bw bh`` of a box x0 y0 x1 y1 in pixels, checked against the image."""
    x0, y0, x1, y1 = box
    if x0 < -TOLERANCE or y0 < -TOLERANCE or x1 > w + TOLERANCE or y1 > h + TOLERANCE:
        raise ConfigError(f"{where} lies outside the {w:g}x{h:g} image (x {x0:g}..{x1:g}, y "
                          f"{y0:g}..{y1:g}): fix the box or the image size")
    x0, x1 = min(max(x0, 0.0), w), min(max(x1, 0.0), w)
    y0, y1 = min(max(y0, 0.0), h), min(max(y1, 0.0), h)
    return (f"{c} {(x0 + x1) / 2 / w:.6f} {(y0 + y1) / 2 / h:.6f} {(x1 - x0) / w:.6f} "
            f"{(y1 - y0) / h:.6f}")


__all__ = ["BOXES", "LabelKind", "ObjectLine", "TOLERANCE", "box_line", "check_unique",
           "known_kinds", "label_kind", "safe_name"]
