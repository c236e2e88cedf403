"""RT-DETR's blocks as torch-pruning traces and counts them (the same modules, state dict and
outputs as Ultralytics'):

- :class:`RTDETRDecoderTraceable`: Ultralytics' ``RTDETRDecoder`` returns ``(predictions,
  (boxes, scores, encoder boxes, encoder scores, denoising meta))`` in eval mode, whose ``None``
  (no denoising without targets) torch-pruning's tracer cannot walk; while the dependency graph
  may be traced (gradients on, no export) it returns the predictions alone (eval) or, without
  targets, the four tensors (train; Ultralytics' loss passes its targets and gets all five).
- :class:`AIFITraceable`: the encoder's transformer layer (``AIFI``) passes its attention's
  ``value`` by keyword, which torch-pruning's operation counter cannot read (it unpacks
  ``q, k, v`` from the positional inputs); here it is passed by position.

Both keep their widths (pruning ignores them: heads, query and hidden dims stay); what pruning
changes is the width of the CNN features the encoder's convolutions and the decoder read."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from . import offline  # noqa: F401  (first: the offline environment before Ultralytics)
from .yolov9 import tracing_graph

from ultralytics.nn.modules.head import RTDETRDecoder  # noqa: E402
from ultralytics.nn.modules.transformer import AIFI  # noqa: E402


def _take_over(new: nn.Module, old: nn.Module) -> None:
    """``new`` (a bare instance) holds ``old``'s modules, parameters, buffers and attributes."""
    nn.Module.__init__(new)
    new.__dict__.update({k: v for k, v in old.__dict__.items()
                         if k not in ("_modules", "_parameters", "_buffers")})
    for kind in ("_modules", "_parameters", "_buffers"):
        getattr(new, kind).update(getattr(old, kind))


class RTDETRDecoderTraceable(RTDETRDecoder):
    """Ultralytics' RTDETRDecoder whose outputs hold no ``None`` while the dependency graph is
    traced (see the module doc)."""

    def __init__(self, decoder: RTDETRDecoder):
        _take_over(self, decoder)

    def forward(self, x: Any, batch: dict | None = None) -> Any:
        out = super().forward(x, batch)
        if not tracing_graph():
            return out
        if self.training:  # without targets (a trace, not Ultralytics' loss): no denoising meta
            return out if batch is not None else tuple(t for t in out if torch.is_tensor(t))
        return out[0] if isinstance(out, tuple) else out

    def as_native(self) -> RTDETRDecoder:
        """Ultralytics' RTDETRDecoder of the same modules and settings."""
        native = RTDETRDecoder.__new__(RTDETRDecoder)
        _take_over(native, self)
        return native


class AIFITraceable(AIFI):
    """Ultralytics' AIFI passing its attention's ``value`` by position (see the module doc)."""

    def __init__(self, layer: AIFI):
        _take_over(self, layer)

    def forward_post(self, src: torch.Tensor, src_mask: torch.Tensor | None = None,
                     src_key_padding_mask: torch.Tensor | None = None,
                     pos: torch.Tensor | None = None) -> torch.Tensor:
        q = k = self.with_pos_embed(src, pos)
        src2 = self.ma(q, k, src, attn_mask=src_mask, key_padding_mask=src_key_padding_mask)[0]
        src = self.norm1(src + self.dropout1(src2))
        src2 = self.fc2(self.dropout(self.act(self.fc1(src))))
        return self.norm2(src + self.dropout2(src2))

    def forward_pre(self, src: torch.Tensor, src_mask: torch.Tensor | None = None,
                    src_key_padding_mask: torch.Tensor | None = None,
                    pos: torch.Tensor | None = None) -> torch.Tensor:
        src2 = self.norm1(src)
        q = k = self.with_pos_embed(src2, pos)
        src2 = self.ma(q, k, src2, attn_mask=src_mask, key_padding_mask=src_key_padding_mask)[0]
        src = src + self.dropout1(src2)
        src2 = self.fc2(self.dropout(self.act(self.fc1(self.norm2(src)))))
        return src + self.dropout2(src2)

    def as_native(self) -> AIFI:
        """Ultralytics' AIFI of the same modules and settings."""
        native = AIFI.__new__(AIFI)
        _take_over(native, self)
        return native


__all__ = ["AIFITraceable", "RTDETRDecoderTraceable"]
