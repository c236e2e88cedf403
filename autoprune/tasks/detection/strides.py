"""The input sizes a YOLO model takes: a multiple of its largest stride (32 for most, 64 for a
P6 head, whose extra level halves the P5 map once more and is concatenated back with it)."""
from __future__ import annotations

import torch
import torch.nn as nn

from ...errors import ConfigError


def largest_stride(model: nn.Module) -> int:
    """The model's largest stride (Ultralytics' ``stride`` tensor; 32 when it records none)."""
    stride = getattr(model, "stride", None)
    if torch.is_tensor(stride) and stride.numel():
        return int(stride.max().item())
    return 32


def check_input_size(model: nn.Module, input_size: int) -> None:
    """A one-line ConfigError when ``input_size`` is not a multiple of the model's largest
    stride (its feature levels would not line up where they are concatenated)."""
    stride = largest_stride(model)
    if input_size % stride:
        fits = -(-input_size // stride) * stride
        raise ConfigError(f"input_size={input_size} does not fit this model: its largest stride "
                          f"is {stride} (a P6 head adds a stride-{stride} level), so the input "
                          f"must be a multiple of {stride}: e.g. input_size={fits}")


__all__ = ["check_input_size", "largest_stride"]
