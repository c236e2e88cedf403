"""Pretrained classifiers: timm weights through the Hugging Face hub and its cache, torchvision
weights through their enums and torch hub's cache (``TORCH_HOME``), the classifier head made
fresh for the user's classes, and the pretrained data config (mean, std, input size,
interpolation, crop) with timm's transforms for it.
(over 400 lines: timm and torchvision weights and their data configs side by side.)

``spec`` names the weights: ``True`` (timm's word) or ``"IMAGENET"`` (PaddleX's, any case) for the
architecture's default weights; ``"timm/<model>.<tag>"`` / ``"<model>.<tag>"`` or
``"hf-hub:<org>/<name>[@rev]"`` for a given checkpoint (timm); a weights enum name such as
``"IMAGENET1K_V2"``, ``"DEFAULT"`` or ``"ResNet50_Weights.IMAGENET1K_V1"`` (torchvision).
Files are read from the caches without the network; see :mod:`..weights` for when a download is
tried and the one-line error when it cannot be.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import timm
import timm.data
import torch
import torch.nn as nn
import torchvision
from PIL import Image
from torchvision import transforms

from ...errors import ConfigError
from .. import hub_cache, timm_rules, weights
from ..weights import Provenance
from . import models as torchvision_models

IMAGENET = "imagenet"
HF_HUB = "hf-hub:"
WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt")
SMALL = 64  # below this side, random crops keep at least 35 % of the image (the project's recipe)
SMALL_SCALE = (0.35, 1.0)


def is_hub_spec(value: Any) -> bool:
    """Whether ``pretrain_weights`` / ``pretrained`` names hub weights (True, 'IMAGENET', a timm
    tag, an hf-hub id, a torchvision enum name) rather than a local file: a string that is an
    existing path or ends like a weights file is a file."""
    if value is True:
        return True
    if not isinstance(value, str) or not value.strip():
        return False
    text = value.strip()
    if text.lower().startswith(HF_HUB) or text.lower() == IMAGENET:
        return True
    return not Path(text).exists() and not text.lower().endswith(WEIGHT_SUFFIXES)


def _bad_spec(spec: Any) -> ConfigError:
    return ConfigError(f"pretrained={spec!r} is not a weights name: use True or 'IMAGENET' "
                       f"(the default ImageNet weights), 'timm/<model>.<tag>' or "
                       f"'hf-hub:<org>/<name>' (timm), a torchvision weights name such as "
                       f"'IMAGENET1K_V1', or pass pretrain_weights=<local file>")


def _spec_text(spec: Any) -> str | None:
    """None for the default weights (True, 'IMAGENET'), else the stripped name."""
    if spec is True:
        return None
    if not isinstance(spec, str) or not spec.strip():
        raise _bad_spec(spec)
    text = spec.strip()
    return None if text.lower() == IMAGENET else text


def create_pretrained(arch_key: str, num_classes: int,
                      spec: bool | str = True) -> tuple[nn.Module, Provenance, dict[str, Any]]:
    """``(model, provenance, data_config)``: the classifier ``arch_key`` (``timm/<name>`` or
    ``torchvision/<name>``, see ``adapter.resolve_arch``) with the weights ``spec`` names and a
    fresh head of ``num_classes`` outputs (kept when it already has that many), made traceable
    as ``build_classifier`` does. ``data_config`` holds the pretrained input settings: mean,
    std, input_size, interpolation, crop_pct, crop_mode, and the weights' ``num_classes`` (None
    when unknown)."""
    source, _, name = arch_key.partition("/")
    text = _spec_text(spec)
    if source == "timm" and name:
        return _timm(name, num_classes, text)
    if source == "torchvision" and name:
        return _torchvision(name, num_classes, text)
    raise ConfigError(f"{arch_key!r} is not an architecture key: pass 'timm/<name>' or "
                      f"'torchvision/<name>' (adapter.resolve_arch)")


# -- timm ----------------------------------------------------------------------------------------
def _timm_tags(name: str) -> list[str]:
    return [n.split(".", 1)[1] for n in timm.list_pretrained(f"{name}.*")]


def _registered_cfg(name: str, tag: str | None) -> dict[str, Any]:
    """timm's pretrained config of ``name`` (its default tag when ``tag`` is None)."""
    tags = _timm_tags(name)
    if not tags:
        raise ConfigError(f"timm has no pretrained weights for {name!r}: train it from scratch "
                          f"(no pretrained=) or pass pretrain_weights=<local file>")
    if tag is not None and tag not in tags:
        default = timm.models.get_pretrained_cfg(name).tag
        raise ConfigError(f"timm has no pretrained tag {tag!r} for {name!r}: use one of "
                          f"{', '.join(tags[:8])}{' ...' if len(tags) > 8 else ''}, or "
                          f"pretrained=True for the default ({default})")
    cfg = timm.models.get_pretrained_cfg(f"{name}.{tag}" if tag else name)
    return cfg.to_dict()


def _other_arch(spec: str, other: str, name: str) -> ConfigError:
    example = f"timm/{name}.{timm.models.get_pretrained_cfg(name).tag}" if _timm_tags(name) \
        else "pretrained=True"
    return ConfigError(f"pretrained weights {spec!r} are for timm model {other!r}, not "
                       f"{name!r}: pick weights of {name} (e.g. {example}) or model={other!r}")


def _timm_plan(name: str, text: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """``(registered cfg, None)`` or, for an hf-hub repo timm does not list, ``(None, repo)``."""
    if text is None:
        return _registered_cfg(name, None), None
    if text.lower().startswith(HF_HUB):
        hub_id = text[len(HF_HUB):]
        repo = hub_id.partition("@")[0]
        if repo.startswith("timm/") and "@" not in hub_id and "." in repo:
            arch, tag = timm.models.split_model_name_tag(repo[len("timm/"):])
            if timm.is_model(arch) and tag in _timm_tags(arch):
                if arch != name:
                    raise _other_arch(text, arch, name)
                return _registered_cfg(name, tag), None
            if timm.is_model(arch) and tag:
                _check_unknown_tag(repo, arch, tag)
        return None, hub_id
    bare = text[len("timm/"):] if text.startswith("timm/") else text
    if "/" in bare or not bare:
        raise ConfigError(f"pretrained={text!r} is not a timm weights name: use "
                          f"'timm/<model>.<tag>' or 'hf-hub:{text}' for a Hugging Face repo")
    arch, tag = timm.models.split_model_name_tag(bare)
    if not timm.is_model(arch):
        raise _bad_spec(text)
    if arch != name:
        raise _other_arch(text, arch, name)
    return _registered_cfg(name, tag or None), None


def _check_unknown_tag(repo: str, arch: str, tag: str) -> None:
    """``hf-hub:timm/<arch>.<tag>`` of a tag timm does not list: when the hub cannot be asked
    and the cache holds no such repo, say so (a typo, most likely) rather than "not cached"."""
    folder = hub_cache.hf_repo_folder(repo)
    if folder.is_dir():
        return  # a repo published after this timm, cached: read it
    reason = hub_cache.hf_offline_reason()
    if reason is None:
        return  # the hub answers: it says whether the repo exists
    tags = _timm_tags(arch)
    listed = f"its tags: {', '.join(tags[:6])}{' ...' if len(tags) > 6 else ''}" if tags \
        else "it lists none"
    fetch = hub_cache.hf_fetch_command(repo, ("config.json", hub_cache.HF_WEIGHTS[0]), None,
                                       hub_cache.hf_cache_dir())
    raise ConfigError(f"timm lists no pretrained tag {tag!r} for {arch!r} ({listed}) and the "
                      f"Hugging Face cache holds no repo {repo} ({folder}); whether the hub has "
                      f"one cannot be asked ({reason}): check the tag, e.g. "
                      f"hf-hub:timm/{arch}.{tags[0] if tags else '<tag>'}, or for a repo "
                      f"published after this timm fetch it on a connected machine ({fetch})")


def _timm(name: str, num_classes: int,
          text: str | None) -> tuple[nn.Module, Provenance, dict[str, Any]]:
    cfg, hub_id = _timm_plan(name, text)
    if cfg is not None:
        path, prov = hub_cache.timm_cfg_file(cfg)
        fix = weights.refetch(str(cfg.get("hf_hub_id") or prov.id))
        weights.read_weights(path, fix)  # damaged, truncated or a pickle: refused here
        with weights.loading(path, fix):
            model = timm.create_model(f"{name}.{cfg['tag']}" if cfg.get("tag") else name,
                                      pretrained=True, num_classes=num_classes,
                                      pretrained_cfg_overlay={"file": str(path)})
    else:
        model, prov = _timm_from_hub(name, num_classes, hub_id, text)
    if getattr(model, "num_classes", num_classes) != num_classes:
        raise ConfigError(f"timm model {name!r} is a feature encoder without a classification "
                          f"head: pick a timm classifier")
    data_config = dict(timm.data.resolve_model_data_config(model))
    data_config["num_classes"] = (getattr(model, "pretrained_cfg", None) or {}).get("num_classes")
    return timm_rules.make_traceable(model), prov, data_config


def _timm_from_hub(name: str, num_classes: int, hub_id: str,
                   text: str) -> tuple[nn.Module, Provenance]:
    """A timm model from an hf-hub repo timm does not list: its config.json (architecture
    checked first) and weights from the cache, loaded by timm's ``local-dir:`` source."""
    repo, _, revision = hub_id.partition("@")
    what = hub_id
    cfg_file = hub_cache.hf_file(repo, ("config.json",), revision or None, what=what,
                                 fetch_files=("config.json", hub_cache.HF_WEIGHTS[0]))
    fix = weights.refetch(what)
    config = _hub_config(cfg_file, fix)
    arch = config.get("architecture") or config["pretrained_cfg"].get("architecture")
    if arch != name:
        raise _other_arch(text, str(arch), name)
    names = config["pretrained_cfg"].get("hf_hub_filename")
    path = hub_cache.hf_file(repo, (names,) if names else hub_cache.HF_WEIGHTS, revision or None,
                             what=what)
    if path.parent != cfg_file.parent:
        raise ConfigError(f"{repo}: config.json and {path.name} are cached from different "
                          f"revisions ({cfg_file.parent.name}, {path.parent.name}): fetch the "
                          f"repo again with hf download {repo}")
    _check_head(config, weights.read_weights(path, fix), name, path, fix)
    with weights.loading(path, fix):
        model = timm.create_model(f"local-dir:{cfg_file.parent}", pretrained=True,
                                  num_classes=num_classes)
    tag = config["pretrained_cfg"].get("tag")
    url = hub_cache.hf_url(repo, path.name, revision or None)
    return model, weights.file_provenance(path, "timm", hub_id, tag, url)


def _hub_config(path: Path, fix: str) -> dict[str, Any]:
    """A cached timm ``config.json`` (its ``pretrained_cfg`` a mapping, ``{}`` when absent)."""
    config = weights.read_json_config(path, fix)
    pretrained = config.get("pretrained_cfg")
    if pretrained is not None and not isinstance(pretrained, dict):
        raise ConfigError(f"{path} is not a timm config.json ('pretrained_cfg' holds a "
                          f"{type(pretrained).__name__}): {fix}")
    return {**config, "pretrained_cfg": pretrained or {}}


def _check_head(config: dict[str, Any], state: dict[str, torch.Tensor], name: str, path: Path,
                fix: str) -> None:
    """Refuse cached weights whose classifier has another number of classes than the
    ``config.json`` beside them says (timm would keep that head and fail to load it)."""
    classes = config.get("num_classes", config["pretrained_cfg"].get("num_classes"))
    head = config["pretrained_cfg"].get("classifier")
    if head is None:
        default = timm.models.get_pretrained_cfg(name)
        head = default.classifier if default is not None else None
    heads = [f"{h}.weight" for h in ([head] if isinstance(head, str) else head or [])]
    found = next((state[k] for k in heads if k in state), None)
    if isinstance(classes, int) and found is not None and found.shape[0] != classes:
        raise ConfigError(f"{path.parent / 'config.json'} says num_classes={classes} but "
                          f"{path} holds a classifier of {found.shape[0]} classes: the cached "
                          f"repo is inconsistent; {fix}")


def pretrained_data_config(arch_key: str, spec: bool | str = True) -> dict[str, Any]:
    """The data config :func:`create_pretrained` returns, without loading weights (timm's
    registered config, an hf-hub repo's cached config.json, torchvision's enum): for building
    the datasets before the model."""
    source, _, name = arch_key.partition("/")
    text = _spec_text(spec)
    if source == "torchvision":
        member = torchvision_weights(name, text if text else True)
        return {**torchvision_data_config(member), "num_classes": len(member.meta["categories"])}
    if source != "timm":
        raise ConfigError(f"{arch_key!r} is not an architecture key: pass 'timm/<name>' or "
                          f"'torchvision/<name>' (adapter.resolve_arch)")
    cfg, hub_id = _timm_plan(name, text)
    if cfg is None:
        repo, _, revision = hub_id.partition("@")
        path = hub_cache.hf_file(repo, ("config.json",), revision or None, what=hub_id,
                                 fetch_files=("config.json", hub_cache.HF_WEIGHTS[0]))
        config = _hub_config(path, weights.refetch(hub_id))
        cfg = dict(config["pretrained_cfg"] or config)
        cfg["num_classes"] = config.get("num_classes", cfg.get("num_classes"))  # timm's order
    return {**timm.data.resolve_data_config(pretrained_cfg=dict(cfg)),
            "num_classes": cfg.get("num_classes")}


# -- torchvision ---------------------------------------------------------------------------------
def _weights_enum(name: str) -> Any:
    try:
        return torchvision.models.get_model_weights(name)
    except (ValueError, KeyError):
        raise ConfigError(f"torchvision has no pretrained weights for {name!r}: train it from "
                          f"scratch or pass pretrain_weights=<local file>") from None


def torchvision_weights(name: str, spec: bool | str = True) -> Any:
    """The torchvision weights enum member ``spec`` names for model ``name`` (``DEFAULT`` for
    True / 'IMAGENET')."""
    enum = _weights_enum(name)
    text = _spec_text(spec)
    if text is None:
        return enum.DEFAULT
    try:
        return enum.verify(text)
    except (ValueError, KeyError, TypeError):
        names = ", ".join(m for m in enum.__members__)
        raise ConfigError(f"torchvision has no weights {text!r} for {name!r}: use one of "
                          f"{names}") from None


def _weights_kwargs(name: str, member: Any) -> dict[str, Any]:
    """What torchvision's builders set when given weights (googlenet/inception_v3 normalise
    their input themselves; ViT and MaxViT take the weights' image size)."""
    if name in ("googlenet", "inception_v3"):
        return {"transform_input": True, "init_weights": False}
    if name.startswith("vit_"):
        return {"image_size": member.meta["min_size"][0]}
    if name.startswith("maxvit"):
        return {"input_size": member.meta["min_size"]}
    return {}


def _shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _reference_shapes(name: str, num_classes: int,
                      kwargs: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The tensor shapes of the model the weights were trained as (built on the meta device,
    on the CPU for builders that compute with tensors, e.g. RegNet)."""
    try:
        with torch.device("meta"):
            return _shapes(torchvision.models.get_model(name, weights=None,
                                                        num_classes=num_classes, **kwargs))
    except (NotImplementedError, RuntimeError):
        return _shapes(torchvision.models.get_model(name, weights=None, num_classes=num_classes,
                                                    **kwargs))


def _torchvision(name: str, num_classes: int,
                 text: str | None) -> tuple[nn.Module, Provenance, dict[str, Any]]:
    member = torchvision_weights(name, text if text is not None else True)
    full = f"{type(member).__name__}.{member.name}"
    fetch = (f"python -c \"import torchvision; torchvision.models.get_model('{name}', "
             f"weights='{full}')\"")
    path = hub_cache.torch_hub_file(member.url, what=f"torchvision {full}", fetch=fetch)
    state = weights.read_weights(path, weights.refetch(f"torchvision {full} ({fetch})"))
    kwargs = _weights_kwargs(name, member)
    ref = _reference_shapes(name, len(member.meta["categories"]), kwargs)
    theirs = {k: tuple(v.shape) for k, v in state.items()}
    if theirs != ref:
        odd = sorted(set(theirs) ^ set(ref)) or [k for k in ref if ref[k] != theirs[k]]
        raise ConfigError(f"{path} does not fit torchvision {name} ({len(odd)} tensors differ, "
                          f"e.g. {odd[0]}): delete it and fetch {full} again")
    model = torchvision.models.get_model(name, weights=None, num_classes=num_classes, **kwargs)
    mine = _shapes(model)
    head = [k for k in ref if mine[k] != ref[k]]
    for k in head:
        state.pop(k)
    model.load_state_dict(state, strict=False)
    prov = weights.file_provenance(path, "torchvision", full, member.name, member.url)
    config = {**torchvision_data_config(member), "num_classes": len(member.meta["categories"])}
    return torchvision_models.make_traceable(model), prov, config


def torchvision_data_config(member: Any) -> dict[str, Any]:
    """The input settings of torchvision weights (their ``transforms()``) in timm's keys."""
    tf = member.transforms()
    crop, resize = int(tf.crop_size[0]), int(tf.resize_size[0])
    return {"input_size": (3, crop, crop), "interpolation": tf.interpolation.value,
            "mean": tuple(tf.mean), "std": tuple(tf.std), "crop_pct": crop / resize,
            "crop_mode": "center"}


# -- transforms and seeding ----------------------------------------------------------------------
class ToRGB:
    """PIL image -> RGB (greyscale repeated over three channels; a picklable transform)."""

    def __call__(self, image: Any) -> Any:
        return image.convert("RGB") if isinstance(image, Image.Image) and \
            image.mode != "RGB" else image

    def __repr__(self) -> str:
        return "ToRGB()"


def data_transforms(data_config: dict[str, Any], train: bool,
                    input_size: int | None = None, *,
                    scale: tuple[float, float] | None = None) -> transforms.Compose:
    """timm's ``create_transform`` for a pretrained data config (``input_size`` overrides its
    side), after a conversion to RGB. Training crops keep at least 35 % of the image below
    :data:`SMALL` px (timm's 8 % leaves a few pixels of a 32 px image), timm's range above,
    unless ``scale`` is given."""
    channels, *side = tuple(data_config.get("input_size") or (3, 224, 224))
    size = (input_size, input_size) if input_size else tuple(side)
    if train and scale is None and min(size) < SMALL:
        scale = SMALL_SCALE
    tf = timm.data.create_transform(
        input_size=(3, *size), is_training=train, scale=scale,
        interpolation=data_config.get("interpolation", "bilinear"),
        mean=tuple(data_config.get("mean", timm.data.IMAGENET_DEFAULT_MEAN)),
        std=tuple(data_config.get("std", timm.data.IMAGENET_DEFAULT_STD)),
        crop_pct=data_config.get("crop_pct"), crop_mode=data_config.get("crop_mode"))
    return transforms.Compose([ToRGB(), *tf.transforms])


def seed_torchvision_cache(model: nn.Module | dict[str, torch.Tensor], name: str,
                           spec: bool | str = True) -> Path:
    """Write ``model``'s weights where torchvision's ``spec`` weights of ``name`` are cached
    (``$TORCH_HOME/hub/checkpoints/<file name of the enum's url>``); returns the file."""
    return hub_cache.seed_torch_hub(model, torchvision_weights(name, spec).url)


def seed_timm_cache(model: nn.Module, tag: str | None = None,
                    cache_dir: str | os.PathLike | None = None) -> Path:
    """Publish a timm ``model`` as the hub weights timm looks for (its architecture's ``tag``,
    the default tag when None) into a Hugging Face cache; returns the weights file."""
    name = model.pretrained_cfg["architecture"]
    cfg = _registered_cfg(name, tag)
    repo = str(cfg["hf_hub_id"]).partition("@")[0]
    return hub_cache.seed_hf_cache(model, repo, cache_dir, {"tag": cfg.get("tag")})


__all__ = ["ToRGB", "create_pretrained", "data_transforms", "is_hub_spec",
           "pretrained_data_config", "seed_timm_cache", "seed_torchvision_cache",
           "torchvision_data_config", "torchvision_weights"]
