"""YOLO-seg data sets: a detection ``data.yaml`` (read and checked by
:func:`~autoprune.tasks.detection.data.read_data_yaml`) whose labels are polygons."""
from __future__ import annotations

from typing import Any

from ...errors import ConfigError
from ..detection.data import checked_label_files, first_box_line


def check_polygons(data: dict[str, Any]) -> None:
    """Refuse a data set (as read by ``read_data_yaml``) whose labels are boxes: Ultralytics'
    segment trainer needs a polygon ``class x1 y1 x2 y2 x3 y3 ...`` per object (checked in the
    first ``LABELS_CHECKED`` label files of each split)."""
    for path, lines in checked_label_files(data):
        n = first_box_line(lines)  # a file holds one kind of label (read_data_yaml checked it)
        if n is not None:
            raise ConfigError(f"{path} line {n} is a box ('class cx cy w h'): instance "
                              f"segmentation needs a polygon 'class x1 y1 x2 y2 x3 y3 ...' per "
                              f"object (write_yolo_dataset(..., task='segment') writes them)")
