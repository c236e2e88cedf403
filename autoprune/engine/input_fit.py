"""Why a model's forward pass refuses an input, in one line: the module that raised, the shape it
was given and the sizes it declares (a window, block, halo, patch or image size that the input
must fit), e.g. a halo-attention block whose 8-pixel blocks do not tile a 4x4 feature map."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from .data import tensors_in

# attributes by which layers declare the sizes their input must fit
SIZE_ATTRIBUTES = ("img_size", "patch_size", "window_size", "block_size", "halo_size",
                   "grid_size", "feat_size", "resolution", "partition_size")


def failing_module(model: nn.Module, error: BaseException
                   ) -> tuple[str, nn.Module, tuple[int, ...] | None] | None:
    """``(name, module, input shape)`` of the innermost module of ``model`` on ``error``'s
    traceback (the one whose ``forward`` raised, or called what raised), or None."""
    names = {id(m): n for n, m in model.named_modules()}
    found = None
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        owner = frame.f_locals.get("self")
        if isinstance(owner, nn.Module) and id(owner) in names:
            args = frame.f_code.co_varnames[1:frame.f_code.co_argcount]
            first = next((frame.f_locals[a] for a in args
                          if torch.is_tensor(frame.f_locals.get(a))), None)
            found = (names[id(owner)], owner, tuple(first.shape) if first is not None else None)
        tb = tb.tb_next
    return found


def _sizes(module: nn.Module) -> str:
    """``"block_size=8, halo_size=3"``: the sizes ``module`` declares, if any."""
    found = []
    for key in SIZE_ATTRIBUTES:
        value = getattr(module, key, None)
        if isinstance(value, (int, tuple, list)) and not isinstance(value, bool):
            found.append(f"{key}={tuple(value) if isinstance(value, list) else value}")
    return ", ".join(found)


def describe_refusal(model: nn.Module, inputs: Any, error: BaseException) -> str:
    """One line: ``model`` cannot run on ``inputs`` because of ``error`` (the module that raised,
    its input's shape, the sizes it declares, the library's own message)."""
    shape = next((tuple(t.shape) for t in tensors_in(inputs)), None)
    text = (str(error).strip().splitlines() or [""])[0][:160].rstrip(".")
    what = f"{type(error).__name__}{': ' + text if text else ''}"
    where = failing_module(model, error)
    if where is None:
        return f"{type(model).__name__} cannot run on inputs of shape {shape} ({what})"
    name, module, given = where
    sizes = _sizes(module)
    return (f"{type(model).__name__} cannot run on inputs of shape {shape}: its "
            f"{type(module).__name__} {name!r} refuses its input"
            f"{f' of shape {given}' if given else ''}{f' ({sizes})' if sizes else ''}: {what}")


def forward_refusal(model: nn.Module, inputs: Any) -> str | None:
    """Why a plain forward pass of ``model`` on ``inputs`` fails (:func:`describe_refusal`), or
    None when it runs. No gradients; the model's train/eval mode is kept."""
    args = inputs if isinstance(inputs, (list, tuple)) else (inputs,)
    try:
        with torch.no_grad():
            model(*args)
    except Exception as e:  # noqa: BLE001 - any failure is the answer
        return describe_refusal(model, inputs, e)
    return None


__all__ = ["SIZE_ATTRIBUTES", "describe_refusal", "failing_module", "forward_refusal"]
