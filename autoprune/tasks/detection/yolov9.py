"""Twins of the YOLOv9 blocks (yolov9c / yolov9e) that split a tensor along its channels, with
the same outputs and state dict layout as Ultralytics' blocks:

- **ADown** pools its input, cuts it in two halves with ``chunk`` and sends one half through
  ``cv1`` and the other through a max pool and ``cv2``. The halves are another layer's outputs
  (the previous block's last conv, which also feeds the neck), so they cannot become two layers.
  torch-pruning maps ``chunk`` by the order it meets the consumers, and wrongly; and removing
  channels by importance would leave the halves of unequal width, which ``chunk(2)`` then cuts in
  the wrong place. :class:`ADownMatched` cuts the halves with two slices (each mapped by its own
  offsets) and, only while the dependency graph is traced (gradients on, not exporting), ties
  them channel to channel with a ``where`` whose condition is always false (an element-wise op:
  channel ``i`` of one half is coupled with channel ``i`` of the other). The producer's group
  then holds two packed parts, from which the core removes the same positions (``packed_parts``
  in :mod:`autoprune.engine.channels`): the halves stay equal and matched, so the block is an
  Ultralytics ADown again after pruning.
- **CBLinear** (yolov9e) is one conv whose output is ``split`` into parts, each fused into
  another stage: :class:`CBLinearSplitFree` holds one conv per part, so each part loses channels
  with the stage it is added to.

Both are written back as Ultralytics' own blocks (:meth:`as_native`), exactly.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import offline  # noqa: F401  (first: the offline environment before Ultralytics)

from ultralytics.nn.modules.block import ADown, CBLinear  # noqa: E402

_LAYER_ATTRS = ("f", "i", "type", "np")  # read by DetectionModel._predict_once and model.info


def _copy_layer_attrs(src: nn.Module, dst: nn.Module) -> None:
    for key in _LAYER_ATTRS:
        if hasattr(src, key):
            setattr(dst, key, getattr(src, key))


def tracing_graph() -> bool:
    """True while a forward pass may be recorded for the dependency graph: gradients on and no
    export (torch-pruning traces with autograd; ONNX export and inference need no coupling)."""
    return torch.is_grad_enabled() and not torch.jit.is_tracing() \
        and not torch.onnx.is_in_onnx_export()


class ADownMatched(ADown):
    """Ultralytics' ADown whose two input halves stay equal and matched under pruning (see the
    module doc); an ADown to everything that reads it (same children, attributes and outputs)."""

    def __init__(self, block: ADown):
        nn.Module.__init__(self)
        self.c = block.c
        self.cv1, self.cv2 = block.cv1, block.cv2
        self.train(block.training)
        _copy_layer_attrs(block, self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.avg_pool2d(x, 2, 1, 0, False, True)
        half = x.shape[1] // 2  # what chunk(2, 1) cuts: the halves are kept equal
        x1, x2 = x[:, :half], x[:, half:]
        if tracing_graph():  # couple channel i of each half (x2 unchanged: the condition is false)
            x2 = torch.where(torch.zeros((), dtype=torch.bool, device=x.device), x1, x2)
        x1 = self.cv1(x1)
        x2 = self.cv2(F.max_pool2d(x2, 3, 2, 1))
        return torch.cat((x1, x2), 1)

    def as_native(self) -> ADown:
        """The Ultralytics ADown computing the same (its halves are equal)."""
        native = ADown.__new__(ADown)
        nn.Module.__init__(native)
        native.c = self.cv1.conv.out_channels
        native.cv1, native.cv2 = self.cv1, self.cv2
        native.train(self.training)
        _copy_layer_attrs(self, native)
        return native


def _conv_part(conv: nn.Conv2d, part: slice) -> nn.Conv2d:
    """A copy of ``conv`` holding only the outputs ``part``."""
    new = copy.deepcopy(conv)
    with torch.no_grad():
        new.weight = nn.Parameter(conv.weight[part].clone(), conv.weight.requires_grad)
        if conv.bias is not None:
            new.bias = nn.Parameter(conv.bias[part].clone(), conv.bias.requires_grad)
    new.out_channels = new.weight.shape[0]
    return new


class CBLinearSplitFree(nn.Module):
    """CBLinear without ``split``: ``convs[k]`` computes part ``k`` of the original conv's
    outputs; ``c2s`` (the parts' widths) follows the convs."""

    def __init__(self, block: CBLinear):
        super().__init__()
        starts = [sum(block.c2s[:k]) for k in range(len(block.c2s) + 1)]
        self.convs = nn.ModuleList(_conv_part(block.conv, slice(a, b))
                                   for a, b in zip(starts, starts[1:]))
        self.train(block.training)
        _copy_layer_attrs(block, self)

    @property
    def c2s(self) -> list[int]:
        return [conv.out_channels for conv in self.convs]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(conv(x) for conv in self.convs)

    def as_native(self) -> CBLinear:
        """The Ultralytics CBLinear computing the same (its conv: the parts' convs joined)."""
        native = CBLinear.__new__(CBLinear)
        nn.Module.__init__(native)
        first = self.convs[0]
        conv = copy.deepcopy(first)
        with torch.no_grad():
            conv.weight = nn.Parameter(torch.cat([c.weight for c in self.convs], 0),
                                       first.weight.requires_grad)
            if first.bias is not None:
                conv.bias = nn.Parameter(torch.cat([c.bias for c in self.convs], 0),
                                         first.bias.requires_grad)
        conv.out_channels = conv.weight.shape[0]
        native.conv, native.c2s = conv, self.c2s
        native.train(self.training)
        _copy_layer_attrs(self, native)
        return native


__all__ = ["ADownMatched", "CBLinearSplitFree", "tracing_graph"]
