"""Top-1 accuracy that reports image by image, for the adaptive analysis's early stop
(:mod:`autoprune.engine.incremental`): every evaluation image's correctness (1 or 0), the images
visited in a seeded uniformly random order (which the ``"confidence"`` bound needs), the batches
decoded once."""
from __future__ import annotations

from typing import Any, Iterator

import torch
import torch.nn as nn

from ...engine.data import CachedBatches, make_loader, subset
from ...engine.incremental import Step

SEED = 0  # the order of the images: fixed, so every point sees them in the same order
BATCH = 64  # images a step (a look at the bound happens at the end of a step)


class ShuffledTop1:
    """``incremental(model, start)``: per-image top-1 correctness of the adapter's evaluation
    images, in a seeded random order; ``eval(model)`` (``__call__``) is the adapter's own top-1."""

    random_order = True
    resumable = True

    def __init__(self, adapter: Any):
        self.adapter = adapter
        self.images = len(adapter.eval_set)
        self.order = torch.randperm(self.images, generator=torch.Generator().manual_seed(SEED))
        self._batches: CachedBatches | None = None

    def __call__(self, model: nn.Module) -> float:
        return self.adapter.evaluate(model)["top1"]

    def incremental(self, model: nn.Module, start: int = 0) -> Iterator[Step]:
        if start % BATCH and start < self.images:
            raise ValueError(f"start={start} is not at a step boundary ({BATCH} images a step)")
        if self._batches is None:
            shuffled = subset(self.adapter.eval_set, self.order.tolist())
            self._batches = CachedBatches(make_loader(
                shuffled, BATCH, shuffle=False, num_workers=self.adapter.num_workers),
                device=self.adapter.device)
        device = self.adapter.device
        model.to(device)
        for k, (inputs, targets) in enumerate(self._batches):
            if k * BATCH < start:
                continue
            logits = model(inputs.to(device))
            right = logits.topk(1, dim=1).indices[:, 0] == targets.to(device)
            yield Step(len(targets), scores=right.double().cpu())
