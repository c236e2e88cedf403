"""YOLO-seg data sets: a detection ``data.yaml`` (read and checked by
:func:`~autoprune.tasks.detection.data.read_data_yaml`) whose labels are polygons."""
from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from ..detection.data import checked_label_files


def check_polygons(data: dict[str, Any]) -> None:
    """Refuse a data set (as read by ``read_data_yaml``) whose labels are boxes: Ultralytics'
    segment trainer needs a polygon ``class x1 y1 x2 y2 x3 y3 ...`` per object (checked in the
    first ``LABELS_CHECKED`` label files of each split)."""
    for path, lines in checked_label_files(data):
        for n, line in enumerate(lines, 1):
            if len(line.split()) == 5:
                raise ConfigError(f"{path} line {n} is a box ('class cx cy w h'): instance "
                                  f"segmentation needs a polygon 'class x1 y1 x2 y2 x3 y3 ...' per "
                                  f"object (write_yolo_dataset(..., task='segment') writes them)")
            if line.strip():
                break  # a file holds one kind of label (read_data_yaml checked it)
