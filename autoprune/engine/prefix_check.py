"""The prefix cache set up for an analysis: the unpruned model's evaluation records the stage
outputs, a second pass checks that replaying them changes nothing, or the cache is dropped
(:mod:`autoprune.engine.prefix_cache`). One function per kind of evaluation: a whole call
(:func:`prepare_cache`, the full analysis) or an incremental one that also gives the per-image
scores (:func:`unpruned_scores`, the adaptive analysis)."""
from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn as nn

from .groups import PruningGraph
from .incremental import full_scores
from .points import EvalFn, _evaluate, eval_mode
from .prefix_cache import OverBudget, PrefixCache


def prepare_cache(model: nn.Module, eval_fn: EvalFn, graph: PruningGraph,
                  points: list[tuple[str, float]], baseline: float
                  ) -> tuple[PrefixCache | None, float]:
    """Record the unpruned stage outputs, then check that replaying them changes nothing: the
    cache (None when unusable) and the seconds the recording pass spent copying outputs (not
    part of an evaluation's cost: the estimate takes them off that pass's time)."""
    cache = PrefixCache(model)
    try:
        with cache.recording(stop_over_budget=True):
            recorded = _evaluate(model, eval_fn, "for the unpruned model")
    except OverBudget:  # e.g. resnet50 at 224 px: ~16 MB an image; not a pass to finish
        return None, 0.0
    copying = cache.recording_seconds
    if not cache.enabled or recorded != baseline:  # no usable stages, or a non-deterministic eval
        return None, copying
    first = max(cache.first_touched(graph.touched_modules(graph.group(n))) for n, _ in points)
    with cache.skipping_before(first) as skipped:
        replayed = _evaluate(model, eval_fn, "for the unpruned model")
    return (cache if skipped and replayed == recorded else None), copying


def unpruned_scores(model: nn.Module, eval_fn: Any, graph: PruningGraph, groups: list[str],
                    use_cache: bool
                    ) -> tuple[torch.Tensor | None, float, PrefixCache | None, float | None]:
    """One whole incremental evaluation of the unpruned model: ``(per-image scores or None,
    metric, prefix cache, seconds of the check)``. With ``use_cache`` the pass records the prefix
    cache, which a second (timed) pass then checks (replaying the stages before the deepest of
    ``groups``' first touched layers must give the same scores), or it is dropped."""
    if not use_cache or not groups:
        with eval_mode(model):
            scores, value = full_scores(eval_fn, model)
        return scores, value, None, None
    cache = PrefixCache(model)
    with eval_mode(model), cache.recording():
        scores, value = full_scores(eval_fn, model)
    if not cache.enabled:
        return scores, value, None, None
    first = max(cache.first_touched(graph.touched_modules(graph.group(n))) for n in groups)
    start = time.perf_counter()
    with eval_mode(model), cache.skipping_before(first) as skipped:
        replayed, again = full_scores(eval_fn, model) if skipped else (None, None)
    seconds = time.perf_counter() - start
    same = skipped and again == value and (scores is None or torch.equal(replayed, scores))
    return scores, value, (cache if same else None), (seconds if same else None)
