"""Top-k accuracy over cached evaluation batches."""
from __future__ import annotations

from typing import Iterable

import torch
import torch.nn as nn


@torch.no_grad()
def evaluate_topk(model: nn.Module, batches: Iterable, *, device: torch.device,
                  topk: tuple[int, ...] = (1, 5)) -> dict[str, float]:
    """Top-k accuracy (fractions in [0, 1]) over ``batches`` of ``(inputs, targets)``."""
    was_training = model.training
    model.to(device).eval()
    correct = {k: 0 for k in topk}
    seen = 0
    for inputs, targets in batches:
        inputs, targets = inputs.to(device), targets.to(device)
        logits = model(inputs)
        top = logits.topk(min(max(topk), logits.shape[1]), dim=1).indices
        hits = top == targets[:, None]
        for k in topk:
            correct[k] += hits[:, :k].any(dim=1).sum().item()
        seen += len(targets)
    model.train(was_training)
    if seen == 0:
        raise ValueError("evaluation data is empty: pass a dataset with at least one image")
    return {f"top{k}": correct[k] / seen for k in topk}
