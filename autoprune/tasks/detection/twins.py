"""Split-free twins of Ultralytics' C2f / C3k2, C2PSA, PSA and RepNCSPELAN4 / ELAN1: the same
outputs, but the two halves that ``chunk`` / ``split`` cut out of ``cv1`` are two layers, so that
each can lose channels on its own. YOLOv9's ADown and CBLinear split a tensor too: their twins
are in :mod:`.yolov9` (ADown's halves come from another layer's output, which pruning keeps in
two matched halves; CBLinear's parts become one conv each). :func:`patch_model` puts them all in
a model (taking off the zero channels :mod:`.native` padded a written-back block with),
:func:`is_patched` says whether one is left to put. RT-DETR's decoder and AIFI get traceable twins
too (:mod:`.rtdetr_blocks`)."""
from __future__ import annotations

import copy

import torch
import torch.nn as nn

from ...engine.fast_copy import fast_deepcopy
from ...engine.padding import remove_channels
from . import offline  # noqa: F401  (first: the offline environment before Ultralytics)

from ultralytics.nn.modules import C2PSA, PSA, C2f, Conv  # noqa: E402
from ultralytics.nn.modules.block import ADown, CBLinear, RepNCSPELAN4  # noqa: E402

from .rtdetr_blocks import (AIFI, AIFITraceable, RTDETRDecoder,  # noqa: E402
                            RTDETRDecoderTraceable)
from .yolov9 import ADownMatched, CBLinearSplitFree  # noqa: E402

_LAYER_ATTRS = ("f", "i", "type", "np")  # read by DetectionModel._predict_once and model.info


def _split_conv(conv: Conv, c: int) -> tuple[Conv, Conv]:
    """Cut an Ultralytics Conv (conv + bn + act) with 2c outputs into two with c outputs each."""
    halves = []
    for part in (slice(0, c), slice(c, None)):
        new = copy.deepcopy(conv)
        with torch.no_grad():
            new.conv.weight = nn.Parameter(conv.conv.weight[part].clone(),
                                           conv.conv.weight.requires_grad)
            if conv.conv.bias is not None:
                new.conv.bias = nn.Parameter(conv.conv.bias[part].clone(),
                                             conv.conv.bias.requires_grad)
            new.conv.out_channels = new.conv.weight.shape[0]
            bn = getattr(conv, "bn", None)
            if bn is not None:
                for key in ("weight", "bias"):
                    p = getattr(bn, key)
                    if p is not None:
                        setattr(new.bn, key, nn.Parameter(p[part].clone(), p.requires_grad))
                for key in ("running_mean", "running_var"):
                    b = getattr(bn, key)
                    if b is not None:
                        setattr(new.bn, key, b[part].clone())
                new.bn.num_features = new.conv.out_channels
        halves.append(new)
    return halves[0], halves[1]


def _copy_layer_attrs(src: nn.Module, dst: nn.Module) -> nn.Module:
    for key in _LAYER_ATTRS:
        if hasattr(src, key):
            setattr(dst, key, getattr(src, key))
    return dst


class SplitCv1(nn.Module):
    """A block whose ``cv1`` output was split in two halves, now the layers ``cv0`` and ``cv1``;
    its other layers (``cv2``, ``m``, ``attn``...) are taken over as they are, in their order."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.c = block.c
        self.native = type(block).__name__  # the Ultralytics class it is written back as
        self.cv0, self.cv1 = _split_conv(block.cv1, block.c)
        for name, child in block.named_children():
            if name != "cv1":
                setattr(self, name, child)
        self.training = block.training  # (a written-back native block takes the twin's mode)
        _copy_layer_attrs(block, self)


class C2fSplitFree(SplitCv1):
    """C2f / C3k2 without ``chunk``: ``cv0`` and ``cv1`` are the two halves of the original ``cv1``.

    ``y = [cv0(x), cv1(x)]; y += [m(y[-1]) for m in self.m]; cv2(cat(y))`` — the same numbers as
    the original, but each half is its own layer, so the halves can lose channels independently.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv0(x), self.cv1(x)]
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class C2PSASplitFree(SplitCv1):
    """C2PSA without ``split``: ``cv0`` (passed through) and ``cv1`` (into the PSA blocks)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cv2(torch.cat((self.cv0(x), self.m(self.cv1(x))), 1))


class PSASplitFree(SplitCv1):
    """PSA without ``split``: ``cv0`` (passed through) and ``cv1`` (attention + feed-forward)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = self.cv1(x)
        b = b + self.attn(b)
        b = b + self.ffn(b)
        return self.cv2(torch.cat((self.cv0(x), b), 1))


class ELANSplitFree(SplitCv1):
    """RepNCSPELAN4 / ELAN1 (YOLOv9) without ``chunk``: ``cv0`` and ``cv1`` are the two halves of
    the original ``cv1``; ``y = [cv0(x), cv1(x)]; y += [cv2(y[-1]), cv3(...)]; cv4(cat(y))``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = [self.cv0(x), self.cv1(x)]
        y.extend(m(y[-1]) for m in (self.cv2, self.cv3))
        return self.cv4(torch.cat(y, 1))


# C3k2 is a C2f, ELAN1 a RepNCSPELAN4
TWINS = ((C2f, C2fSplitFree), (C2PSA, C2PSASplitFree), (PSA, PSASplitFree),
         (RepNCSPELAN4, ELANSplitFree), (ADown, ADownMatched), (CBLinear, CBLinearSplitFree),
         (RTDETRDecoder, RTDETRDecoderTraceable), (AIFI, AIFITraceable))
SPLIT_FREE = tuple(t for _, t in TWINS)

# Checkpoints name the classes of the modules they hold: these keep the name they had before the
# package was split into modules (``autoprune.tasks.detection.models.C2fSplitFree``...), so files
# written before and after load alike; models.py exports them under that name.
for _twin in SPLIT_FREE:
    _twin.__module__ = "autoprune.tasks.detection.models"
del _twin

# on a native block written back by :mod:`.native`: the pruned widths of its two halves
PADDED = "autoprune_halves"


def patch_model(model: nn.Module) -> nn.Module:
    """Replace every C2f / C3k2 / C2PSA / PSA / RepNCSPELAN4 / ADown / CBLinear of ``model`` by its
    split-free (or matched) twin (in place).

    The outputs stay the same; the model keeps its layer indices, so Ultralytics still runs it.
    """
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            for original, twin in TWINS:
                if isinstance(child, original) and type(child).forward is original.forward:
                    new = twin(child)
                    if getattr(child, PADDED, None):  # written back by write_native: unpad
                        new = _unpadded(new, getattr(child, PADDED))
                    setattr(parent, name, new)
                    break
    return model


def probe_input(block: SplitCv1) -> torch.Tensor:
    """The input torch-pruning traces ``block`` with to pad or remove channels of its halves."""
    return torch.zeros(1, block.cv0.conv.in_channels, 8, 8)


def same_outputs(a: nn.Module, b: nn.Module, channels: int) -> bool:
    """True when the two blocks give the same outputs (float, eval mode) on a random input."""
    x = torch.randn(2, channels, 16, 16, generator=torch.Generator().manual_seed(0))
    a, b = fast_deepcopy(a).float().eval(), fast_deepcopy(b).float().eval()
    with torch.no_grad():
        want, got = a(x), b(x)
    return want.shape == got.shape and bool(torch.allclose(
        got, want, rtol=1e-5, atol=1e-5 * max(1.0, want.abs().max().item())))


def _unpadded(block: SplitCv1, halves: tuple[int, int]) -> SplitCv1:
    """``block`` (just split from a native block written back) without the zero channels its
    halves were padded with; ``block`` itself if they are not zero any more (trained since)."""
    dtype = block.cv0.conv.weight.dtype
    work = copy.deepcopy(block).float()
    try:
        for half, kept in zip((work.cv0, work.cv1), halves):
            remove_channels(work, probe_input(work), half.conv,
                            list(range(int(kept), half.conv.out_channels)))
    except (ValueError, RuntimeError, IndexError):
        return block
    if not same_outputs(block, work, block.cv0.conv.in_channels):
        return block
    return work.to(dtype)


def is_patched(model: nn.Module) -> bool:
    """True when no split/chunk block is left."""
    return not any(isinstance(m, original) and type(m).forward is original.forward
                   for m in model.modules() for original, _ in TWINS)


__all__ = ["ADownMatched", "C2PSASplitFree", "C2fSplitFree", "CBLinearSplitFree", "ELANSplitFree",
           "AIFITraceable", "RTDETRDecoderTraceable", "PADDED", "PSASplitFree",
           "SPLIT_FREE", "SplitCv1", "TWINS", "is_patched", "patch_model", "probe_input",
           "same_outputs"]
