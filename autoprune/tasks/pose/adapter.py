"""Pose adapter: the detection adapter (Ultralytics trains and validates, the pruned module is kept
through training) with YOLO pose models built for the data's keypoint shape, Ultralytics' pose
trainer and validator, the keypoint head's outputs kept intact, and keypoint mAP50-95 (OKS) as
the metric."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import torch.nn as nn

from ...errors import ConfigError
from ..detection.adapter import DetectionAdapter
from ..detection.inputs import autoprune_meta, is_checkpoint_file
from . import models as pose
from .data import check_keypoints, check_pose_label_file, kpt_shape_of
from .names import NAMES


def _shape_problem(shape: Any) -> bool:
    """True when ``shape`` is not a keypoint shape ``[K >= 1, 2 | 3]``."""
    return not (isinstance(shape, (list, tuple)) and len(shape) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in shape)
                and shape[0] >= 1 and shape[1] in (2, 3))


class PoseAdapter(DetectionAdapter):
    """Pose estimation with Ultralytics YOLO pose models on a YOLO pose ``data.yaml``
    (``kpt_shape``, labels ``class cx cy w h`` + keypoints): builds patched PoseModels for the
    data's keypoint shape, trains them with Ultralytics' pose trainer (the pruned module itself),
    validates keypoint and box mAP with its pose validator. Metrics: ``map50_95_pose`` (OKS
    mAP50-95, the pruning metric), ``map50_pose``, ``map50_95_box``, ``map50_box``. ONNX: one
    output ``(batch, 4 + nc + K * ndim, anchors)`` (boxes, class scores, keypoints x, y in pixels
    and their visibility scores). ``kpt_shape``: the keypoint shape when no data says it (a
    checkpoint's)."""

    task, metric, kind = "pose", "map50_95_pose", "YOLO pose"
    ultralytics, variant = pose.TASK, NAMES   # Ultralytics' classes, the models' names
    metric_sources = (("pose", "P"), ("box", "B"))  # map50_95_pose <- mAP50-95(P) (OKS)...
    check_labels = staticmethod(check_pose_label_file)
    train_arg_numbers = frozenset({"pose", "kobj", "rle"})  # its loss weights in train_args
    labels = None  # reads YOLO data only
    build_keys = ("num_classes", "nc", "kpt_shape")
    # the keypoint branch is max(c // 4, keypoint values) wide: 16 in a 5-keypoint profile's
    # YOLOv8n-pose, 51 in a COCO-pose model's
    label_branches = DetectionAdapter.label_branches + ("cv4", "one2one_cv4")

    def __init__(self, data: str | os.PathLike | None = None,
                 eval_data: str | os.PathLike | None = None, *,
                 kpt_shape: list[int] | None = None, **kwargs: Any):
        super().__init__(data, eval_data, **kwargs)
        found: list[int] | None = None
        for source in (self.data, self.eval_data if self.eval_data is not self.data else None):
            if source is None:
                continue
            shape = kpt_shape_of(source["cfg"], source["yaml"])
            if found is not None and shape != found:
                raise ConfigError(f"{self.data['yaml']} and {source['yaml']} have different "
                                  f"keypoints (kpt_shape {found} and {shape}): use one kpt_shape")
            check_keypoints(source, shape)
            found = shape
        if kpt_shape is not None:
            if _shape_problem(kpt_shape):
                raise ConfigError(f"kpt_shape={kpt_shape!r:.60} must be [keypoints, 2 or 3], "
                                  f"e.g. [17, 3]")
            if found is not None and list(kpt_shape) != found:
                raise ConfigError(f"kpt_shape={list(kpt_shape)} but the data has kpt_shape "
                                  f"{found}: pass kpt_shape={found} or omit it")
        self.kpt_shape = found or (list(kpt_shape) if kpt_shape is not None else None)

    # -- checkpoints -----------------------------------------------------------------------------
    @classmethod
    def checkpoint_settings(cls, meta: Mapping[str, Any]) -> dict[str, Any]:
        """The class count and keypoint shape a checkpoint was built with."""
        return {**super().checkpoint_settings(meta),
                "kpt_shape": (meta.get("build") or {}).get("kpt_shape")}

    @classmethod
    def check_build_kwargs(cls, build: dict[str, Any]) -> str | None:
        """Detection's checks, and ``kpt_shape`` a keypoint shape ``[K, 2 | 3]``."""
        why = super().check_build_kwargs(build)
        if why is None and build.get("kpt_shape") is not None \
                and _shape_problem(build["kpt_shape"]):
            why = (f"metadata field 'build.kpt_shape' is {build['kpt_shape']!r:.40}, not "
                   f"[keypoints, 2 or 3]")
        return why

    def prepare_model(self, model: Any, pretrain_weights: Any, save_dir: Path) -> tuple[Any, Any]:
        """As detection (:meth:`DetectionAdapter.prepare_model`); an autoprune checkpoint of
        other keypoints than the data's is refused in one line."""
        if is_checkpoint_file(model) and self.kpt_shape is not None:
            meta = autoprune_meta(model) or {}
            shape = (meta.get("build") or {}).get("kpt_shape")
            if meta.get("task") == self.task and shape is not None \
                    and list(shape) != self.kpt_shape:
                raise ConfigError(f"{model} predicts kpt_shape {list(shape)} but the data has "
                                  f"{self.kpt_shape}: use data with those keypoints or train a "
                                  f"new model on this data")
        return super().prepare_model(model, pretrain_weights, save_dir)

    # -- the model -------------------------------------------------------------------------------
    def build(self, arch: str, num_classes: int | None = None, nc: int | None = None,
              kpt_shape: list[int] | None = None, **_: Any) -> nn.Module:
        """An untrained, patched (split-free) pose model of ``arch`` predicting ``kpt_shape``
        keypoints (the data's unless given; without either, its YAML's: COCO's [17, 3])."""
        if kpt_shape is not None and _shape_problem(kpt_shape):
            raise ConfigError(f"kpt_shape={kpt_shape!r:.60} must be [keypoints, 2 or 3], e.g. "
                              f"[17, 3]")
        return super().build(arch, num_classes, nc, kpt_shape=kpt_shape)

    def new_model(self, yaml_name: str, num_classes: int,
                  kpt_shape: list[int] | None = None, **_: Any) -> nn.Module:
        """Ultralytics' PoseModel of ``yaml_name`` for ``kpt_shape`` (else the data's)."""
        shape = self.kpt_shape if kpt_shape is None else list(kpt_shape)
        extra = {"data_kpt_shape": list(shape)} if shape else {}
        return self.model_class(yaml_name, nc=num_classes, verbose=False, **extra)

    def build_kwargs(self, model: nn.Module) -> dict[str, Any]:
        return {**super().build_kwargs(model),
                "kpt_shape": pose.kpt_shape_of(model) or self.kpt_shape}

    def check_model(self, model: nn.Module) -> None:
        """Refuse a model that is not a patched YOLO pose model of the data's classes and
        keypoints."""
        self.check_head(model)
        shape = pose.kpt_shape_of(model)
        if self.kpt_shape is not None and shape != self.kpt_shape:
            raise ConfigError(f"the model predicts kpt_shape {shape} but the data has "
                              f"{self.kpt_shape}: pass its YAML name (e.g. 'yolo11n-pose.yaml', "
                              f"built for the data) or use data with kpt_shape {shape}")
        super().check_model(model)

    def onnx_metadata(self, model: nn.Module) -> dict[str, Any]:
        """Detection's, and the keypoint shape (Ultralytics' ``kpt_shape``) the model predicts."""
        shape = pose.kpt_shape_of(model)
        return {**super().onnx_metadata(model), **({"kpt_shape": shape} if shape else {})}
