"""An evaluation that runs a copy of the model instead of the model (Ultralytics' validator runs
a fused copy) tells the analysis so with :func:`follow`: the analysis's faster evaluation then
applies to that copy too. Its prefix cache records and replays on the copy
(:func:`autoprune.engine.prefix_cache.follow`), and its folded evaluation, which cannot fold an
already folded copy, lays out the copy's convolution weights channels-last
(:func:`autoprune.engine.fused_eval.follow`). Outside an analysis it does nothing."""
from __future__ import annotations

import torch.nn as nn

from . import fused_eval, prefix_cache


def follow(model: nn.Module, copy: nn.Module) -> None:
    """Make the analysis running on ``model`` (if any) evaluate ``copy`` as it would ``model``;
    call it once ``copy`` is in the form the evaluation runs (fused)."""
    fused_eval.follow(model, copy)
    prefix_cache.follow(model, copy)


__all__ = ["follow"]
