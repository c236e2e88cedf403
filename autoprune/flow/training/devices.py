"""The device training and evaluation run on: ``"auto"`` (a GPU when there is one), ``cpu``,
``cuda``, ``cuda:1``; several GPUs only under torchrun."""
from __future__ import annotations

import os
from typing import Any

import torch

from ...engine.distributed import ranks_on_gpus
from ...errors import ConfigError


def pick_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` means CUDA when there is one, else CPU. Every task resolves its ``device`` here:
    a name torch does not know, or a GPU this machine lacks, is a one-line ConfigError; so is a
    request for several GPUs from one process (``[0, 1]``, ``"0,1"``, Ultralytics' way): one
    process drives one device, torchrun starts one process per GPU."""
    several = _several_devices(device)
    if several:
        raise ConfigError(f"device={device!r} asks one process for {several} GPUs: launch one "
                          f"process per GPU with `torchrun --nproc_per_node {several} -m autoprune "
                          f"train config.yaml` (or your script under torchrun) and device='auto'")
    if device == "auto":
        if not torch.cuda.is_available():
            return torch.device("cpu")
        ranks_on_gpus(device)  # a torchrun rank without a GPU of its own: one line, the fix
        device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}"  # one GPU per torchrun rank
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device={device!r} is not a device: use 'auto', 'cpu', 'cuda' or "
                          f"'cuda:N'") from None
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if resolved.type == "cuda" and (resolved.index or 0) >= gpus:
        have = "no CUDA GPU" if not gpus else "1 GPU: cuda:0" if gpus == 1 else \
            f"{gpus} GPUs: cuda:0 .. cuda:{gpus - 1}"
        raise ConfigError(f"device {device} is not available (this machine has {have}): use "
                          f"device='cpu' or 'auto'")
    return resolved


def _several_devices(device: Any) -> int:
    """How many devices ``device`` names when it names more than one (``[0, 1]``, ``"0,1"``,
    ``"cuda:0,1"``), else 0."""
    if isinstance(device, (list, tuple)):
        return len(device) if len(device) > 1 else 0
    if isinstance(device, str) and "," in device:
        return len([d for d in device.split(":")[-1].split(",") if d.strip()])
    return 0
