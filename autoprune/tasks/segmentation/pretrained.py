"""Pretrained smp encoders through smp's own loader and cache.

smp 0.6 keeps its encoder weights on the Hugging Face hub: ``encoders[<name>]
["pretrained_settings"][<weights>]`` names a repo (``smp-hub/resnet18.imagenet``) and a fixed
commit, and ``get_encoder`` calls ``hf_hub_download`` for ``config.json`` and
``model.safetensors`` at that commit, then ``encoder.load_state_dict`` and
``set_in_channels(..., pretrained=True)``. ``tu-<timm model>`` encoders take timm's pretrained
weights instead (``encoder_weights`` only switches them on; the tag is part of the name).

:func:`encoder_weights_file` finds (or fetches, see :mod:`..weights`) those files in the hub
cache as the environment names it now; :func:`build_with_encoder_weights` then lets smp build the
model, its hub look-ups pinned to that cache and to files already there, so nothing else is
fetched.
"""
from __future__ import annotations

import contextlib
import functools
import os
import threading
from pathlib import Path
from typing import Any, Iterator

import segmentation_models_pytorch as smp
import segmentation_models_pytorch.encoders as smp_encoders
import timm
import torch
import torch.nn as nn

from ...errors import ConfigError
from .. import hub_cache, weights
from ..weights import Provenance

LOCAL = "encoder_weights=<local file of encoder weights>"
SMP_FILES = ("config.json", "model.safetensors")
IMAGENET_PREPROCESSING = {"input_space": "RGB", "input_range": [0, 1],
                          "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
_HUB_LOCK = threading.Lock()


def smp_encoder_name(encoder: str) -> str:
    """The name smp builds ``encoder`` under (its deprecated ``timm-`` names become ``tu-``)."""
    if smp_encoders.is_equivalent_to_timm_universal(encoder):
        encoder = encoder.replace("timm-", "tu-")
        if "mobilenetv3" in encoder:
            encoder = encoder.replace("tu-", "tu-tf_")
    return encoder


def encoder_weight_names(encoder: str) -> list[str]:
    """The ``encoder_weights`` names smp lists for ``encoder`` (``['imagenet']`` for a tu-
    encoder timm has weights for)."""
    name = smp_encoder_name(encoder)
    if name.startswith("tu-"):
        return ["imagenet"] if timm.list_pretrained(name[3:].partition(".")[0] + ".*") else []
    entry = smp_encoders.encoders.get(name)
    return list(entry["pretrained_settings"]) if entry else []


def _settings(encoder: str, weights_name: str) -> dict[str, str]:
    name = smp_encoder_name(encoder)
    entry = smp_encoders.encoders.get(name)
    if entry is None:
        raise ConfigError(f"unknown encoder {encoder!r}: use one of smp's encoders "
                          f"(resnet18, mobilenet_v2, efficientnet-b0, ...) or tu-<timm model>")
    settings = entry["pretrained_settings"]
    if weights_name not in settings:
        raise ConfigError(f"smp has no encoder_weights={weights_name!r} for {encoder!r}: use "
                          f"one of {', '.join(settings) or '(none)'}, None, or {LOCAL}")
    return settings[weights_name]


def _timm_encoder_file(encoder: str, weights_name: Any) -> tuple[Path, Provenance]:
    if weights_name is not True and str(weights_name).lower() != "imagenet":
        raise ConfigError(f"encoder_weights={weights_name!r} for {encoder!r}: a tu- encoder takes "
                          f"'imagenet' (timm's default weights) and its tag in the name, e.g. "
                          f"tu-resnet18.a1_in1k")
    model = encoder[3:]
    arch, tag = timm.models.split_model_name_tag(model)
    tags = [n.split(".", 1)[1] for n in timm.list_pretrained(f"{arch}.*")]
    if not tags or (tag and tag not in tags):
        raise ConfigError(f"timm has no pretrained weights {model!r} for encoder {encoder!r}: "
                          f"use tu-{arch}.<tag> with a tag of {', '.join(tags[:6]) or '(none)'}, "
                          f"encoder_weights=None, or {LOCAL}")
    cfg = timm.models.get_pretrained_cfg(model).to_dict()
    return hub_cache.timm_cfg_file(cfg, local=LOCAL)


def encoder_weights_file(encoder: str,
                         weights_name: str | bool = "imagenet") -> tuple[Path, Provenance]:
    """``(weights file, provenance)`` of smp's ``weights_name`` weights for ``encoder``: the
    hub cache's ``model.safetensors`` of smp's repo at smp's commit (``config.json`` beside it),
    or a tu- encoder's timm weights; fetched only when the hub may be asked. ``True`` means
    ``'imagenet'``."""
    name = smp_encoder_name(encoder)
    if name.startswith("tu-"):
        return _timm_encoder_file(name, weights_name)
    weights_name = "imagenet" if weights_name is True else weights_name
    settings = _settings(name, str(weights_name))
    repo, revision = settings["repo_id"], settings["revision"]
    what = f"{repo} (smp {encoder} {weights_name})"
    path = hub_cache.hf_file(repo, ("model.safetensors",), revision, what=what, local=LOCAL,
                             fetch_files=SMP_FILES)
    hub_cache.hf_file(repo, ("config.json",), revision, what=what, local=LOCAL,
                      fetch_files=SMP_FILES)  # smp reads it too
    return path, weights.file_provenance(path, "smp", repo, str(weights_name),
                                         hub_cache.hf_url(repo, path.name, revision))


def encoder_data_config(encoder: str, weights_name: str | bool = "imagenet") -> dict[str, Any]:
    """The input settings of the encoder weights (smp's ``get_preprocessing_params``: mean, std,
    input_space, input_range) from the cached ``config.json``, or timm's for a tu- encoder."""
    name = smp_encoder_name(encoder)
    if name.startswith("tu-"):
        cfg = timm.models.get_pretrained_cfg(name[3:]).to_dict()
        return {"input_space": "RGB", "input_range": [0, 1], "mean": list(cfg["mean"]),
                "std": list(cfg["std"])}
    path, prov = encoder_weights_file(name, weights_name)
    return _preprocessing(path.parent / "config.json", weights.refetch(str(prov.id), LOCAL))


def _preprocessing(path: Path, fix: str) -> dict[str, Any]:
    """The input settings in smp's cached ``config.json`` (mean, std: lists of numbers)."""
    settings = weights.read_json_config(path, fix)
    out = {"input_space": settings.get("input_space", "RGB"),
           "input_range": settings.get("input_range", [0, 1]),
           "mean": settings.get("mean"), "std": settings.get("std")}
    for key in ("input_range", "mean", "std"):
        value = out[key]
        if not isinstance(value, list) or not value or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            raise ConfigError(f"{path} gives {key}={value!r:.40}, not a list of numbers: {fix}")
    return out


@contextlib.contextmanager
def _pinned_hub(cache_dir: Path) -> Iterator[None]:
    """smp's ``hf_hub_download`` reads only ``cache_dir`` and only files already there."""
    with _HUB_LOCK:
        original = smp_encoders.hf_hub_download
        smp_encoders.hf_hub_download = functools.partial(
            original, cache_dir=str(cache_dir), local_files_only=True)
        try:
            yield
        finally:
            smp_encoders.hf_hub_download = original


def build_with_encoder_weights(arch: str, encoder: str, encoder_weights: str | bool = "imagenet",
                               **create_kwargs: Any) -> tuple[nn.Module, Provenance]:
    """``smp.create_model(arch, encoder_name=encoder, encoder_weights=..., **create_kwargs)``
    with the encoder's pretrained weights read from the cache (see :func:`encoder_weights_file`)
    by smp's own loader; returns the model and where its encoder weights came from."""
    path, prov = encoder_weights_file(encoder, encoder_weights)
    name = smp_encoder_name(encoder)
    fix = weights.refetch(str(prov.id), LOCAL)
    weights.read_weights(path, fix)  # damaged, truncated or a pickle: refused before smp reads
    if name.startswith("tu-"):  # timm loads them: point its pretrained config at the file
        with weights.loading(path, fix):
            model = smp.create_model(arch, encoder_name=encoder, encoder_weights=True,
                                     pretrained_cfg_overlay={"file": str(path)}, **create_kwargs)
        return model, prov
    _preprocessing(path.parent / "config.json", fix)  # smp reads it too
    with _pinned_hub(hub_cache.hf_cache_dir()), weights.loading(path, fix):
        model = smp.create_model(arch, encoder_name=encoder, encoder_weights=prov.tag,
                                 **create_kwargs)
    return model, prov


def read_encoder_file(path: str | os.PathLike, encoder: str) -> dict[str, torch.Tensor]:
    """The state dict of a local file of ``encoder`` weights (safetensors or torch's format,
    read weights-only; a ``{"state_dict": ...}`` wrapper unwrapped); a damaged file or a pickle
    of other objects is a one-line ConfigError."""
    return weights.read_weights(path, f"pass a state_dict of the {encoder} encoder (torch.save "
                                      f"or safetensors), or encoder_weights=None")


def seed_smp_cache(encoder_module: nn.Module | dict[str, torch.Tensor], encoder: str,
                   weights_name: str = "imagenet",
                   cache_dir: str | os.PathLike | None = None,
                   config: dict[str, Any] | None = None) -> Path:
    """Write encoder weights where smp looks for ``weights_name`` of ``encoder`` (its hub repo at
    its commit, with a ``config.json`` of preprocessing settings, ImageNet's by default) in a
    Hugging Face cache; returns the weights file. ``encoder_module`` may be an smp model (its
    encoder is taken), an encoder or a state dict."""
    module = getattr(encoder_module, "encoder", encoder_module)
    settings = _settings(encoder, weights_name)
    return hub_cache.seed_hf_cache(module, settings["repo_id"], cache_dir,
                                   config=config or IMAGENET_PREPROCESSING,
                                   revision=settings["revision"])


__all__ = ["LOCAL", "build_with_encoder_weights", "encoder_data_config", "encoder_weight_names",
           "encoder_weights_file", "read_encoder_file", "seed_smp_cache", "smp_encoder_name"]
