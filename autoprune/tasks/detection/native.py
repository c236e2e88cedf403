"""Writing Ultralytics' native blocks back in place of autoprune's split-free twins
(:mod:`.twins`): a pruned checkpoint that ``YOLO(path)`` loads where autoprune is not installed,
with the same outputs (the narrower half of a block padded with zero channels)."""
from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ...engine.padding import pad_channels
from ...engine.files import atomic_write
from . import offline  # noqa: F401  (first: the offline environment before Ultralytics)
from .checkpoints import load_ultralytics_file
from .twins import PADDED, SPLIT_FREE, TWINS, SplitCv1, probe_input, same_outputs

from ultralytics.nn.modules import Conv  # noqa: E402


def _join_convs(first: Conv, second: Conv) -> Conv:
    """One Conv whose outputs are ``first``'s then ``second``'s (twins' _split_conv undone)."""
    joined = copy.deepcopy(first)
    with torch.no_grad():
        for module, parts in ((joined.conv, (first.conv, second.conv)),
                              (getattr(joined, "bn", None), (getattr(first, "bn", None),
                                                             getattr(second, "bn", None)))):
            if module is None:
                continue
            for key in ("weight", "bias", "running_mean", "running_var"):
                old = getattr(module, key, None)
                if old is None:
                    continue
                value = torch.cat([getattr(p, key) for p in parts], 0)
                setattr(module, key, nn.Parameter(value, old.requires_grad)
                        if isinstance(old, nn.Parameter) else value)
        joined.conv.out_channels = joined.conv.weight.shape[0]
        if getattr(joined, "bn", None) is not None:
            joined.bn.num_features = joined.conv.out_channels
    return joined


def _native_class(block: SplitCv1) -> type:
    """The Ultralytics class a split-free block was made from (C2f or C3k2, ELAN1...)."""
    default = next(original for original, twin in TWINS if isinstance(block, twin))
    from ultralytics.nn.modules import block as blocks

    for name in (getattr(block, "native", None), str(getattr(block, "type", "")).split(".")[-1]):
        cls = getattr(blocks, name, None) if name else None
        if isinstance(cls, type) and issubclass(cls, default) and cls.forward is default.forward:
            return cls
    return default


def native_block(block: SplitCv1) -> nn.Module | None:
    """The native Ultralytics block (C2f, C3k2, C2PSA, PSA, RepNCSPELAN4, ELAN1) that computes
    what the split-free ``block`` computes: the narrower half is padded with zero channels so
    that ``cv1``'s output splits into two equal halves again (the widths are kept in
    ``autoprune_halves`` so that :func:`patch_model` takes them off). None when it cannot be done
    exactly."""
    a, b = block.cv0.conv.out_channels, block.cv1.conv.out_channels
    c = max(a, b)
    dtype = block.cv0.conv.weight.dtype
    work = copy.deepcopy(block).float()
    try:
        pad_channels(work, probe_input(work), work.cv0.conv, c - a)
        pad_channels(work, probe_input(work), work.cv1.conv, c - b)
    except (ValueError, RuntimeError):
        return None
    cls = _native_class(block)
    native = cls.__new__(cls)
    nn.Module.__init__(native)
    for key, value in work.__dict__.items():
        if not key.startswith("_") and key not in ("training", "native"):
            setattr(native, key, value)
    native.c = c
    native.cv1 = _join_convs(work.cv0, work.cv1)
    for name, child in work.named_children():
        if name not in ("cv0", "cv1"):
            setattr(native, name, child)
    if a != b:
        setattr(native, PADDED, (a, b))
    native.train(block.training)
    if not same_outputs(block, native, block.cv0.conv.in_channels):
        return None
    return native.to(dtype)


def to_native(model: nn.Module) -> list[str]:
    """Replace each split-free block of ``model`` by the native Ultralytics block that gives the
    same outputs (in place); returns the names of the blocks that could not be (left as they
    are)."""
    left = []
    names = {m: n for n, m in model.named_modules()}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, SPLIT_FREE):
                native = child.as_native() if hasattr(child, "as_native") \
                    else native_block(child)
                if native is None:
                    left.append(f"{names[parent]}.{name}".lstrip("."))
                else:
                    setattr(parent, name, native)
    return left


@dataclasses.dataclass
class NativeWrite:
    """What :func:`write_native` did: ``left``, the blocks that had to stay split-free (the file
    then still needs autoprune); ``params`` and ``padded_params`` of the model before and after
    (the zero channels added to make the halves equal)."""

    left: list[str]
    params: int = 0
    padded_params: int = 0
    changed: bool = False


def write_native(path: str | os.PathLike, loaded: Any = None) -> NativeWrite:
    """Rewrite the Ultralytics checkpoint at ``path`` (a ``best.pt`` this run trained) with native
    Ultralytics blocks in place of autoprune's split-free ones, so that ``YOLO(path)`` loads it
    where autoprune is not installed; the outputs stay the same. A file without split-free blocks
    is left as it is. ``loaded``: the file as :func:`~.checkpoints.load_ultralytics_file` read
    it (changed here: not to be used after)."""
    ckpt = load_ultralytics_file(path) if loaded is None else loaded
    done, seen = NativeWrite([]), set()
    for key in ("model", "ema"):
        net = ckpt.get(key) if isinstance(ckpt, dict) else None
        if not isinstance(net, nn.Module) or id(net) in seen:
            continue
        seen.add(id(net))
        if any(isinstance(m, SPLIT_FREE) for m in net.modules()):
            done.params = sum(p.numel() for p in net.parameters())
            done.left += to_native(net)
            done.padded_params = sum(p.numel() for p in net.parameters())
            done.changed = True
    if done.changed:
        atomic_write(Path(path), lambda tmp: torch.save(ckpt, tmp))
    done.left = list(dict.fromkeys(done.left))  # in model order, once each
    return done


__all__ = ["NativeWrite", "native_block", "to_native", "write_native"]
