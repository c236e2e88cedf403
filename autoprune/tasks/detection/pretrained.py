"""Ultralytics pretrained weights by name (``yolov8n.pt``, ``yolo26n.pt``, a sub-task's ...):
found the way Ultralytics' ``attempt_download_asset`` finds them (the path as given, which for a
bare name is the current folder, then ``SETTINGS["weights_dir"]``), downloaded into the weights
dir only when Ultralytics may go online, read only through the allow-list loader
(:func:`.checkpoints.read_ultralytics`), and their head adapted to the data's classes the way
Ultralytics' trainer does (:func:`adapt_to_classes`).

Offline means ``YOLO_OFFLINE`` set by the user, or github.com unreachable (one quick probe, see
:mod:`..weights`). :mod:`.offline` sets ``YOLO_OFFLINE=1`` in every autoprune process where the
user did not set it (so that importing Ultralytics makes no DNS look-ups); the user's own value
is read from ``offline.USER_YOLO_OFFLINE`` when that module records it, else from the
environment (where it is then always set).
"""
from __future__ import annotations

import copy
import inspect
import os
from datetime import datetime
from pathlib import Path
from typing import Mapping, Sequence

import torch
import torch.nn as nn

from ...errors import CheckpointError, ConfigError
from .. import weights
from ..weights import Provenance
from . import offline  # first: the offline environment before Ultralytics
from .checkpoints import read_ultralytics
from .console import quiet
from .twins import SPLIT_FREE, patch_model

import ultralytics  # noqa: E402
import ultralytics.utils  # noqa: E402
from ultralytics.utils import DEFAULT_CFG_DICT, DEFAULT_CFG_KEYS  # noqa: E402
from ultralytics.utils.checks import check_yolov5u_filename  # noqa: E402
from ultralytics.utils.downloads import (GITHUB_ASSETS_NAMES, GITHUB_ASSETS_REPO,  # noqa: E402
                                         attempt_download_asset)
from ultralytics.utils.torch_utils import intersect_dicts  # noqa: E402

ASSETS_RELEASE = inspect.signature(attempt_download_asset).parameters["release"].default
LOCAL = "a local .pt as model= (or build from YAML, e.g. 'yolov8n.yaml')"


def weights_dir() -> Path:
    """Ultralytics' weights dir (``SETTINGS["weights_dir"]``, read now; relative to the current
    folder when relative, as Ultralytics joins it)."""
    return Path(ultralytics.utils.SETTINGS["weights_dir"]).expanduser()


def asset_url(name: str) -> str:
    """Where Ultralytics downloads an asset from (its assets repo at its pinned release)."""
    return f"https://github.com/{GITHUB_ASSETS_REPO}/releases/download/{ASSETS_RELEASE}/{name}"


def yolo_offline_reason() -> str | None:
    """Why Ultralytics must stay offline: ``YOLO_OFFLINE`` as the user set it (see the module's
    docstring), or None."""
    value = getattr(offline, "USER_YOLO_OFFLINE", os.environ.get("YOLO_OFFLINE"))
    if value is not None and str(value).strip().lower() in weights.TRUTHY:
        return "YOLO_OFFLINE is set"
    return None


def is_asset_name(name: str | os.PathLike) -> bool:
    """Whether ``name`` is a bare Ultralytics asset name such as ``yolov8n.pt``."""
    text = str(name)
    return Path(text).name == text and check_yolov5u_filename(text, verbose=False) \
        in GITHUB_ASSETS_NAMES


def resolve_ultralytics_weights(name: str | os.PathLike) -> tuple[Path, Provenance]:
    """``(file, provenance)`` of Ultralytics weights: a path as given, else for an asset name
    the copy in the current folder or in Ultralytics' weights dir, else downloaded into the
    weights dir when Ultralytics may go online; a one-line ConfigError otherwise."""
    text = check_yolov5u_filename(str(name).strip(), verbose=False)
    given = Path(text)
    asset = is_asset_name(text)
    if given.is_file():
        return given, _provenance(given, text, asset)
    if not asset:
        raise ConfigError(f"no checkpoint at {name}: not a file and not an Ultralytics weights "
                          f"name (e.g. yolov8n.pt, yolo11n.pt, yolo26n.pt); check the path")
    folder = weights_dir()
    cached = folder / text
    if cached.is_file():
        return cached, _provenance(cached, text, True)
    url = asset_url(text)
    reason = yolo_offline_reason() or weights.unreachable_reason(url)
    if reason is None:
        try:
            with quiet():
                attempt_download_asset(str(cached))  # into the weights dir, not the cwd
        except Exception as e:  # noqa: BLE001 - any network failure is one line
            reason = f"download failed: {weights.first_line(e)}"
        else:
            if cached.is_file():
                return cached, _provenance(cached, text, True)
            reason = "download failed"
    fetch = f"download {url}"
    raise weights.missing_weights_error(text, text, f"{Path.cwd()} or {folder}", reason, fetch,
                                        LOCAL)


def _provenance(path: Path, name: str, asset: bool) -> Provenance:
    if asset:
        return weights.file_provenance(path, "ultralytics", name, Path(name).stem,
                                       asset_url(name))
    return weights.file_provenance(path)


def load_pretrained(name: str | os.PathLike) -> tuple[nn.Module, Provenance]:
    """The (float, eval, unpatched) model of Ultralytics weights named ``name``, read through the
    allow-list loader only, and its provenance."""
    path, prov = resolve_ultralytics_weights(name)
    try:
        model, _ = read_ultralytics(path)
    except Exception as e:  # noqa: BLE001 - refused or unreadable: one line
        raise CheckpointError(f"{path} is not an Ultralytics checkpoint made of known model "
                              f"classes ({weights.first_line(e)}): delete it and fetch {prov.id} "
                              f"again, or pass {LOCAL}") from None
    return model, prov


def _names(nc: int, names: Sequence[str] | Mapping[int, str] | None) -> dict[int, str]:
    if names is None:
        return {i: str(i) for i in range(nc)}
    table = dict(names) if isinstance(names, Mapping) else dict(enumerate(names))
    if sorted(table) != list(range(nc)):
        raise ConfigError(f"{len(table)} class names for nc={nc}: give one name per class "
                          f"0 .. {nc - 1}")
    return {int(k): str(v) for k, v in table.items()}


def _args(model: nn.Module) -> dict:
    """A model's Ultralytics settings as a dict over the defaults (a dict, a namespace or none)."""
    args = getattr(model, "args", None)
    args = vars(args) if args is not None and not isinstance(args, Mapping) else (args or {})
    return {**DEFAULT_CFG_DICT, **dict(args)}


def _has_twins(module: nn.Module) -> bool:
    return any(isinstance(m, SPLIT_FREE) for m in module.modules())


def adapt_to_classes(module: nn.Module, nc: int,
                     names: Sequence[str] | Mapping[int, str] | None = None, *,
                     keep_head_width: bool = True) -> tuple[nn.Module, int, int]:
    """``(model, transferred, total)``: ``module`` (an Ultralytics model from weights) rebuilt
    for ``nc`` classes as Ultralytics' trainer does for ``model=yolov8n.pt`` with another data
    set: a new model of the same class from the module's YAML with the data's ``nc`` and
    ``names``, then ``model.load(module)`` (tensors of matching name and shape transferred, the
    class branch rebuilt at the source's hidden width, class rows remapped by name, the rest
    fresh). A module with split-free twins gets a patched new model. ``transferred`` counts
    the new model's tensors equal to the module's, of ``total``.

    ``keep_head_width=False`` keeps the widths the YAML gives for ``nc`` instead (Ultralytics
    8.4 widens the class branch to the source's, e.g. 80 instead of 64 channels for yolov8n at
    nc < 80): only tensors of equal shape are transferred, so the model is exactly what a
    build from the YAML with ``nc`` makes, as autoprune's checkpoints rebuild it."""
    yaml = getattr(module, "yaml", None)
    if not isinstance(yaml, dict):
        raise ConfigError(f"{type(module).__name__} holds no Ultralytics YAML: adapt a model "
                          f"read from Ultralytics weights")
    source = module.float()
    with quiet():
        model = type(source)(cfg=copy.deepcopy(yaml), ch=yaml.get("channels", 3), nc=nc,
                             verbose=False)
        if _has_twins(source):
            model = patch_model(model)
        model.names = _names(nc, names)
        if keep_head_width:
            model.load(source, verbose=False)
        else:
            model.load_state_dict(intersect_dicts(source.state_dict(), model.state_dict()),
                                  strict=False)
    model.args = _args(source)
    model.task = getattr(source, "task", None) or getattr(model, "task", None)
    mine, theirs = model.state_dict(), source.state_dict()
    same = sum(1 for k, v in mine.items()
               if k in theirs and theirs[k].shape == v.shape and torch.equal(theirs[k], v))
    return model.eval(), same, len(mine)


def seed_ultralytics_weights(model: nn.Module, name: str,
                             folder: str | os.PathLike | None = None) -> Path:
    """Write ``model`` as Ultralytics publishes a weights asset (``strip_optimizer``'s dict:
    the model in half precision and frozen, ``epoch`` -1, no optimizer or EMA, the default
    ``train_args``) into ``folder`` (Ultralytics' weights dir by default); returns the file,
    which loads through the allow-list."""
    from ultralytics.utils.patches import torch_save

    target = Path(folder) if folder is not None else weights_dir()
    target.mkdir(parents=True, exist_ok=True)
    published = copy.deepcopy(model).float()
    published.args = {k: v for k, v in _args(model).items() if k in DEFAULT_CFG_KEYS}
    if hasattr(published, "criterion"):
        published.criterion = None
    published.half()
    for p in published.parameters():
        p.requires_grad = False
    ckpt = {"date": datetime.now().astimezone().isoformat(), "version": ultralytics.__version__,
            "license": "AGPL-3.0 License (https://ultralytics.com/license)",
            "docs": "https://docs.ultralytics.com", "epoch": -1, "best_fitness": None,
            "model": published, "ema": None, "updates": None, "optimizer": None,
            "train_args": dict(published.args), "train_metrics": None, "train_results": None}
    path = target / name
    torch_save(ckpt, path)
    return path


__all__ = ["adapt_to_classes", "asset_url", "is_asset_name", "load_pretrained",
           "resolve_ultralytics_weights", "seed_ultralytics_weights", "weights_dir",
           "yolo_offline_reason"]
