"""The input sizes a classifier's forward takes: a window, halo, block or patch size that must
tile the feature maps, a position embedding of a fixed size (Swin, MaxViT, HaloNet, BoTNet, a
ViT with a fixed image size...). A size the model refuses is a one-line ConfigError before any
data is read, naming the layer and its sizes (:mod:`autoprune.engine.input_fit`) and the least
size it takes. The model is built on the meta device (no memory, no weights) and run there;
models without such layers are not run at all."""
from __future__ import annotations

import re
from typing import Callable

import torch
import torch.nn as nn

from ...engine.input_fit import SIZE_ATTRIBUTES, forward_refusal
from ...errors import ConfigError

# layers whose input a forward pass may refuse: attention and token mixing (their windows,
# blocks, relative positions), patch and position embeddings
_CONSTRAINING = re.compile(r"Attn|Attention|Embed|Window|Partition|Halo|Lambda|Outlook", re.I)
_CHECKED: dict[tuple[str, int], str | None] = {}  # (arch, size) -> the refusal, per process


def may_constrain(model: nn.Module) -> bool:
    """True when ``model`` has a layer that may refuse an input size (see the module doc)."""
    return any(_CONSTRAINING.search(type(m).__name__) or any(
        hasattr(m, key) for key in SIZE_ATTRIBUTES) for m in model.modules())


def _native(model: nn.Module) -> int | None:
    cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None) or {}
    size = cfg.get("input_size") if isinstance(cfg, dict) else None
    return int(size[-1]) if size else None


def _refusal(model: nn.Module, size: int) -> str | None:
    x = torch.empty(1, 3, size, size, device=next(model.parameters()).device)
    return forward_refusal(model, x)


def least_fitting_size(model: nn.Module, size: int, step: int = 32) -> int | None:
    """The least size above ``size`` (multiples of ``step``, up to the model's pretrained size,
    then that size) a forward pass of ``model`` takes; None when none of those runs."""
    native = _native(model) or 224
    candidates = list(range((size // step + 1) * step, max(native, size) + 1, step))
    if native not in candidates:
        candidates.append(native)
    for candidate in candidates[:16]:
        if _refusal(model, candidate) is None:
            return candidate
    return None


def input_size_refusal(arch: str, size: int,
                       build: Callable[[str, int], nn.Module]) -> str | None:
    """Why the classifier ``arch`` (built by ``build(arch, num_classes)`` on the meta device)
    cannot take ``size`` px inputs, with the least size it takes; None when it can, or when it
    cannot be built or run on the meta device (the run then finds out itself)."""
    key = (arch, size)
    if key not in _CHECKED:
        _CHECKED[key] = None
        try:
            with torch.device("meta"):
                model = build(arch, 10).eval()
        except Exception:  # noqa: BLE001 - not buildable on the meta device: not checked here
            return None
        refusal = _refusal(model, size) if may_constrain(model) else None
        if refusal is not None:
            fits = least_fitting_size(model, size)
            if fits is not None:  # (none: the meta device itself may be what fails)
                native = _native(model)
                _CHECKED[key] = (f"{refusal}: pass input_size={fits} (the least size above "
                                 f"{size} it takes"
                                 f"{f'; it was made for {native}' if native else ''})")
    return _CHECKED[key]


def check_input_size(arch: str, size: int, build: Callable[[str, int], nn.Module]) -> None:
    """A one-line ConfigError when the classifier ``arch`` cannot take ``size`` px inputs
    (:func:`input_size_refusal`)."""
    refusal = input_size_refusal(arch, size, build)
    if refusal is not None:
        raise ConfigError(f"input_size={size} does not fit {arch}: {refusal}")


def check_model_input_size(model: nn.Module, size: int) -> None:
    """The same for a built model (run on its device, only when it has a layer that may refuse
    the size); the size it was made for is named, none is searched."""
    if not may_constrain(model):
        return
    was_training = model.training
    try:
        refusal = _refusal(model.eval(), size)
    finally:
        model.train(was_training)
    if refusal is not None:
        native = _native(model)
        hint = f"pass input_size={native} (the size it was made for)" if native else \
            "pass an input_size it takes"
        raise ConfigError(f"input_size={size} does not fit the model: {refusal}; {hint}")


__all__ = ["check_input_size", "check_model_input_size", "input_size_refusal",
           "least_fitting_size", "may_constrain"]
