"""The settings of the Ultralytics tasks (detection and the YOLO tasks built on it), besides the
flow's: Ultralytics trains, so its trainer's own hyper-parameters go in ``train_args``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ...flow.config import TaskSettings, setting


@dataclass
class YoloSettings(TaskSettings):
    """``autoprune.detection.train``'s own settings (and every Ultralytics task's)."""

    flow_defaults: ClassVar[dict[str, Any]] = {"epochs": 100}

    input_size: int | None = setting(None, "input size in pixels, a multiple of 32 (640)",
                                     kind="int")
    batch_size: int | None = setting(None, "images per batch over all processes (16; -1: "
                                     "Ultralytics' AutoBatch)", kind="int")
    data_format: str | None = setting(None, "yolo (a data.yaml), coco (a root with "
                                      "annotations/instances_<split>.json, or the JSON) or voc "
                                      "(Annotations/ + JPEGImages/ + ImageSets/Main); None: told "
                                      "from the path; COCO / VOC are converted once into "
                                      "save_dir/data_cache", kind="str")
    train_args: dict | None = setting(None, "Ultralytics trainer hyper-parameters (lr0, "
                                      "optimizer, mosaic, nbs, patience...; an allow-list)",
                                      kind="dict", train_only=True)
