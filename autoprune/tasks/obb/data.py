"""YOLO OBB data sets: a detection ``data.yaml`` (read and checked by
:func:`~autoprune.tasks.detection.data.read_data_yaml`) whose labels are rotated boxes, the four
corners ``class x1 y1 x2 y2 x3 y3 x4 y4`` (Ultralytics' DOTA-style format; a longer polygon is
boxed by Ultralytics' minimum-area rectangle)."""
from __future__ import annotations

from pathlib import Path

from ...errors import ConfigError
from ..detection.data import check_label_file, first_box_line


def check_obb_label_file(path: Path, nc: int) -> None:
    """Detection's checks of a label file (numbers, class ids, coordinates in [0, 1], one kind of
    line per file), and no upright box ``class cx cy w h``: Ultralytics' OBB trainer needs the
    corners of each object's rotated box."""
    check_label_file(path, nc)  # (a file holds one kind of label)
    n = first_box_line(path.read_text(encoding="utf-8-sig").splitlines())
    if n is not None:
        raise ConfigError(f"{path} line {n} is an upright box ('class cx cy w h'): OBB needs "
                          f"the 4 corners 'class x1 y1 x2 y2 x3 y3 x4 y4' per object "
                          f"(write_yolo_dataset(..., task='obb') writes them)")
