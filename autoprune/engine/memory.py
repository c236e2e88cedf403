"""How much memory a forward pass needs, and how much the machine has free: checked before work
that would otherwise die in the allocator (an export at a huge input size)."""
from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn as nn

from .data import tensors_in


def available_bytes() -> int | None:
    """The memory the machine can still give (Linux ``MemAvailable``), or None when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def activation_bytes(model: nn.Module, inputs: Any) -> int:
    """Bytes of every leaf module's outputs in one forward pass of ``model`` on ``inputs`` (no
    grad, eval mode; the model's mode is kept): what tracing it for an export holds at most."""
    total = 0

    def count(module: nn.Module, args: Any, output: Any) -> None:
        nonlocal total
        total += sum(t.numel() * t.element_size() for t in tensors_in(output))

    leaves = [m for m in model.modules() if not any(True for _ in m.children())]
    hooks = [m.register_forward_hook(count) for m in leaves]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(*(inputs if isinstance(inputs, (list, tuple)) else (inputs,)))
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    return total + sum(t.numel() * t.element_size() for t in tensors_in(inputs))
