"""The detection head (Detect and its subclasses), its class count, and the layers whose output
channels pruning must keep (the head's last convs, DFL, attention blocks, and the parts a
sub-task's head adds)."""
from __future__ import annotations

from typing import Sequence

import torch.nn as nn

from . import offline  # noqa: F401  (first: the offline environment before Ultralytics)

from ultralytics.nn.modules import Detect  # noqa: E402
from ultralytics.nn.modules.block import DFL, Attention  # noqa: E402


def ignored_layers(model: nn.Module, head: type[nn.Module] = Detect,
                   parts: Sequence[str] = ()) -> list[nn.Module]:
    """Leaf modules whose output channels must stay: each Detect branch's last conv (``cv2``,
    ``cv3``, ``cv4`` and the ``one2one_*`` twins), the DFL, and every Attention block (YOLO12's
    area attention ``AAttn`` too: its heads are fixed views of its qkv conv); then of each
    ``head`` (a sub-task's head class) the modules at the dotted paths ``parts`` it has."""
    out: list[nn.Module] = []
    for m in model.modules():
        if isinstance(m, Detect):
            for key in ("cv2", "cv3", "cv4", "cv5", "one2one_cv2", "one2one_cv3", "one2one_cv4"):
                branches = getattr(m, key, None)
                if isinstance(branches, nn.ModuleList):
                    for branch in branches:
                        last = branch[-1] if isinstance(branch, nn.Sequential) else branch
                        out.extend(last.modules())
            if isinstance(getattr(m, "dfl", None), nn.Module):
                out.extend(m.dfl.modules())
        elif isinstance(m, (Attention, DFL)) or "Attention" in type(m).__name__ \
                or type(m).__name__ == "AAttn":  # YOLO12's area attention
            out.extend(m.modules())
    for m in model.modules():
        if isinstance(m, head):
            for path in parts:
                part = _attribute(m, path)
                if isinstance(part, nn.Module):
                    out.extend(part.modules())
    seen, unique = set(), []
    for m in out:
        if id(m) not in seen:
            seen.add(id(m))
            unique.append(m)
    return unique


CLASS_BRANCHES = ("cv3", "one2one_cv3")  # Detect's class branches: max(c, min(nc, 100)) wide


def branch_groups(model: nn.Module, branches: Sequence[str]) -> set[str]:
    """Names of the modules under ``<head>.<branch>.`` for every Detect head of ``model`` and
    each of ``branches`` it has (``cv3``: the class branch, whose channel counts follow the
    number of classes)."""
    prefixes = [f"{name}.{key}." for name, m in model.named_modules() if isinstance(m, Detect)
                for key in branches if isinstance(getattr(m, key, None), nn.ModuleList)]
    return {name for name, _ in model.named_modules()
            if any(name.startswith(p) for p in prefixes)}


def _attribute(module: nn.Module, path: str) -> object:
    """``module.a.b`` of the dotted ``path`` ``"a.b"``; None where a step is missing."""
    for key in path.split("."):
        module = getattr(module, key, None)
    return module


def detect_head(model: nn.Module, head: type[nn.Module] = Detect) -> nn.Module | None:
    """The model's (last) Detect head, or one of its subclasses, or of ``head`` (a sub-task's
    head class); None when it has none."""
    heads = [m for m in model.modules() if isinstance(m, head)]
    return heads[-1] if heads else None


def model_nc(model: nn.Module) -> int | None:
    """Number of classes the model predicts."""
    head = detect_head(model)
    return int(head.nc) if head is not None else getattr(model, "nc", None)


__all__ = ["detect_head", "ignored_layers", "model_nc"]
