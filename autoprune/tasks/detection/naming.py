"""Which YOLO model a name, a checkpoint file or a built model is: its architecture key
(``yolov8n``, or a sub-task's ``yolo11n<suffix>``), read with the adapter's name rules."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from ...engine.checkpoint import read_pruned_metadata
from ...errors import CheckpointError, ConfigError
from . import models as yolo
from .names import canonical_arch, model_stem


def built_arch(model: Any, canonical: Callable[[str], str | None] = canonical_arch,
               suffix: str = "") -> str | None:
    """The key (``yolov8n``, ``yolo11n<suffix>``...) of a YOLO object or model, from the YAML it
    was built from (its file name, or the family plus its ``scale``: ``yolov8<suffix>.yaml`` +
    n), read with ``canonical``; None when it is not one of ours."""
    if isinstance(model, yolo.YOLOModel):
        model = model.model
    cfg = getattr(model, "yaml", None)
    if not isinstance(cfg, dict):
        return None
    stem = model_stem(cfg.get("yaml_file") or "")
    candidates = [stem]
    if stem.endswith(suffix):
        candidates.append(f"{stem[:len(stem) - len(suffix)]}{cfg.get('scale') or ''}{suffix}")
    for candidate in candidates:
        key = canonical(candidate)
        if key:
            return key
    return None


def arch_key(adapter: Any, model: Any) -> str | None:
    """``yolov8n``... of a name (``"yolov8n.yaml"``; ConfigError if unknown), a .pt checkpoint
    (autoprune's metadata, or the YAML inside an Ultralytics one), or a YOLO object /
    DetectionModel (None if unknown), by ``adapter``'s name rules."""
    if not isinstance(model, (str, os.PathLike)):
        return adapter.arch_of_model(model)
    path = Path(model)
    if path.suffix.lower() == ".pt" and path.is_file() \
            and not adapter.canonical_arch(path.stem.lower()):
        try:
            arch = read_pruned_metadata(path).get("arch")
        except CheckpointError:  # an Ultralytics checkpoint (a pickle: the user's own file)
            arch = adapter.arch_of_model(yolo.load_ultralytics(path))
        if arch is None:
            raise ConfigError(f"{path} does not say which {adapter.kind} model it holds: pass "
                              f"its YAML name ({adapter.families})")
        return arch
    return adapter.resolve_arch(str(model))


__all__ = ["arch_key", "built_arch"]
