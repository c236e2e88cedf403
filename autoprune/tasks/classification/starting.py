"""Where a classification run starts: the ``pretrained`` setting checked, the learning rate's
default from scratch or from pretrained weights, and the settings a run from an autoprune
checkpoint keeps (its normalisation, the fine-tuning lr)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ...engine.checkpoint import read_pruned_metadata
from ...errors import CheckpointError, ConfigError
from .pretrained import is_hub_spec

SCRATCH_LR, FINE_TUNE_LR = 0.05, 0.01  # lr's default from scratch / from pretrained weights
PRETRAINED_SOURCES = ("timm", "torchvision")  # hub weights (engine.provenance.SOURCES)


def check_pretrained(pretrained: Any) -> Any:
    """``pretrained`` as given (False/None: off; True or a weights name); anything else is a
    one-line ConfigError."""
    if pretrained is None or pretrained is False:
        return None
    if pretrained is True or (isinstance(pretrained, str) and is_hub_spec(pretrained)):
        return pretrained
    raise ConfigError(f"pretrained={pretrained!r:.60} is not a weights name: use True or "
                      f"'IMAGENET' (the default ImageNet weights), 'timm/<model>.<tag>', "
                      f"'hf-hub:<org>/<name>' or a torchvision weights name; for a local file "
                      f"pass pretrain_weights=<file>")


def kept_from(weights: Any, values: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a run from ``weights`` (an autoprune classification checkpoint) keeps when
    the user leaves them unset: the normalisation and interpolation its model was trained with,
    and the fine-tuning lr when it started from pretrained hub weights (a base model of a
    ``pretrained=True`` run is still a fine-tuned ImageNet model)."""
    if weights is None or is_hub_spec(weights) or not Path(weights).is_file():
        return {}
    try:
        meta = read_pruned_metadata(weights)
    except (CheckpointError, OSError, ValueError):
        return {}  # a plain state_dict, or a damaged file: load_weights says so
    if not isinstance(meta, dict) or meta.get("task") not in (None, "classification"):
        return {}
    data = meta.get("data") if isinstance(meta.get("data"), dict) else {}
    kept = {k: data[k] for k in ("mean", "std", "interpolation")
            if values.get(k) is None and data.get(k) is not None}
    started = meta.get("start_weights") if isinstance(meta.get("start_weights"), dict) else {}
    if values.get("lr") is None and started.get("source") in PRETRAINED_SOURCES:
        kept["lr"] = FINE_TUNE_LR
    return kept


__all__ = ["FINE_TUNE_LR", "PRETRAINED_SOURCES", "SCRATCH_LR", "check_pretrained", "kept_from"]
