"""Ultralytics inside torchrun's processes: the size of the process group, a standalone validation
in one rank, SyncBatchNorm taken off again, and DistributedDataParallel on CPU ranks. No
Ultralytics import here."""
from __future__ import annotations

import contextlib
import sys
from typing import Iterator

import torch.distributed as dist
import torch.nn as nn


def group_size() -> int:
    """The number of processes of torch.distributed's group (1 without one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


@contextlib.contextmanager
def one_process() -> Iterator[None]:
    """Ultralytics as in a single process for the duration of the block, inside a torchrun rank.

    Ultralytics reads ``RANK`` / ``LOCAL_RANK`` once, at import, into each of its modules; under
    torchrun a standalone validation (one rank evaluating a model on its own: a sensitivity
    point, the final check of best.pt) would otherwise gather its statistics from every rank and
    wait for ranks busy elsewhere, and pick a CUDA device on CPU ranks. No-op in one process."""
    saved = []
    for module in _ultralytics_modules():
        for key in ("RANK", "LOCAL_RANK"):
            value = vars(module).get(key)
            if isinstance(value, int) and value != -1:
                saved.append((module, key, value))
                setattr(module, key, -1)
    try:
        yield
    finally:
        for module, key, value in saved:
            setattr(module, key, value)


_scanned: tuple[int, list] = (-1, [])  # (len(sys.modules) when scanned, the modules found)


def _ultralytics_modules() -> list:
    """Ultralytics' modules imported so far, found again only when a module was imported since
    the last call (scanning every module took 3 ms, twice an evaluation of a YOLO analysis)."""
    global _scanned
    if _scanned[0] != len(sys.modules):
        _scanned = (len(sys.modules), [m for name, m in list(sys.modules.items())
                                       if m is not None and name.startswith("ultralytics")])
    return _scanned[1]


def plain_batchnorm(model: nn.Module) -> nn.Module:
    """Replace every ``SyncBatchNorm`` of ``model`` by a ``BatchNorm2d`` holding its parameters
    and running statistics (in place); returns ``model``. Checkpoints then hold Ultralytics'
    plain modules, whether or not training synchronised its statistics."""
    for name, m in list(model.named_modules()):
        if isinstance(m, nn.SyncBatchNorm) and name:
            bn = nn.BatchNorm2d(m.num_features, m.eps, m.momentum, m.affine,
                                m.track_running_stats)
            bn.load_state_dict(m.state_dict())
            bn.to(device=m.weight.device if m.affine else None)
            if m.affine:
                bn.requires_grad_(m.weight.requires_grad)
            model.set_submodule(name, bn.train(m.training))
    return model


@contextlib.contextmanager
def cpu_ddp(enabled: bool) -> Iterator[None]:
    """While enabled, DistributedDataParallel drops ``device_ids=[None]``: Ultralytics passes its
    device's index, which a CPU device has not, and DDP refuses that list for CPU modules."""
    original = nn.parallel.DistributedDataParallel
    if not enabled:
        yield
        return

    class CpuDDP(original):
        def __init__(self, module, device_ids=None, *args, **kwargs):
            if device_ids is not None and all(d is None for d in device_ids):
                device_ids = None
            super().__init__(module, device_ids, *args, **kwargs)

    nn.parallel.DistributedDataParallel = CpuDDP
    try:
        yield
    finally:
        nn.parallel.DistributedDataParallel = original


__all__ = ["cpu_ddp", "group_size", "one_process", "plain_batchnorm"]
