"""The optional protocol of an evaluation that reports as it goes, so an adaptive analysis can
stop a point's evaluation once its loss is decided (:mod:`autoprune.engine.adaptive`).

A plain ``eval_fn(model) -> float`` is always accepted (then only the choice of points is
adaptive). An eval function may also have:

- ``images``: how many images one evaluation covers (counted in ``images_evaluated``);
- ``incremental(model, start=0)``: an iterator of :class:`Step`, one per batch, over the same
  images as ``eval_fn(model)`` (the same every call, in the same order), beginning at image
  ``start`` (a count at which an earlier call stopped between steps). A step carries either
  ``scores`` (each image's score in [0, 1]; the metric is their mean over all images: top-1
  accuracy) or ``low``/``high`` (sure bounds of the whole evaluation's metric given the images
  seen so far, equal once all are seen; the metric is not a mean over images: mIoU), plus
  ``value`` (the metric) on the last step. A bounded step may also carry ``seen``: the metric
  over the images seen so far alone (the evaluation's formula on them), which the estimate said
  before an adaptive analysis reads from a pilot (:mod:`autoprune.engine.adaptive_eta`) and
  nothing decides from.
  ``random_order`` (True when the images are visited in a seeded uniformly random order) allows
  the ``"confidence"`` bound of :mod:`autoprune.engine.bounds`; ``resumable`` allows
  ``start > 0``: for ``scores`` steps alone, for bounded ones with ``state``, the running state
  a bounded step carries (opaque to the engine: mIoU's confusion matrix so far), which
  ``incremental(model, start, state=state)`` continues after that step (how the estimate's
  pilot of a point is handed on to the analysis).
- ``folds_batchnorm``: True when the evaluation runs a copy of the model with each BatchNorm
  folded into its convolution (Ultralytics' validator): the analysis's folded evaluation then
  only lays out that copy's weights (:mod:`autoprune.engine.fused_eval`).

The engine imports no task: tasks build such objects (see the classification and segmentation
adapters' ``incremental_eval``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
import torch.nn as nn

from ..errors import MetricError


@dataclass
class Step:
    """What one batch of an incremental evaluation adds: ``images`` evaluated in it, and either
    their ``scores`` or the whole evaluation's sure ``low``/``high``; ``value`` on the last;
    ``seen``: optionally, the metric of the images seen so far alone (an estimate only), or a
    function that computes it when asked (:meth:`seen_metric`: only the estimate's pilot asks,
    and for mAP it costs as much as the bound); ``state``: a resumable bounded evaluation's
    running state after this step (see the module docstring)."""

    images: int
    scores: torch.Tensor | None = None
    low: float | None = None
    high: float | None = None
    value: float | None = None
    seen: float | Callable[[], float] | None = None
    state: Any = None

    def seen_metric(self) -> float | None:
        """The metric of the images seen so far (``seen``, computed now where it is a
        function), or None where the step says none."""
        return self.seen() if callable(self.seen) else self.seen


def images_of(eval_fn: Any, fallback: int | None = None) -> int | None:
    """How many images one call of ``eval_fn`` evaluates (its ``images``), else ``fallback``."""
    n = getattr(eval_fn, "images", None)
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        return n
    return fallback


def incremental_of(eval_fn: Any) -> Callable[..., Iterator[Step]] | None:
    """``eval_fn.incremental`` when it has one (a callable), else None."""
    fn = getattr(eval_fn, "incremental", None)
    return fn if callable(fn) else None


class CountingEval:
    """``eval_fn`` counting its completed calls and the images they covered (a call cut short,
    e.g. by an exception, counts nothing). ``incremental`` steps are counted by their images."""

    def __init__(self, eval_fn: Any, images: int | None):
        self.eval_fn, self.per_call = eval_fn, images
        self.calls, self.images = 0, 0
        self.seconds: list[float] = []  # each completed call's wall time
        self.incremental = self._incremental if incremental_of(eval_fn) else None
        for name in ("random_order", "resumable", "folds_batchnorm"):
            setattr(self, name, bool(getattr(eval_fn, name, False)))

    def __call__(self, model: nn.Module) -> Any:
        start = time.perf_counter()
        value = self.eval_fn(model)
        self.seconds.append(time.perf_counter() - start)
        self.calls += 1
        self.images += self.per_call or 0
        return value

    def _incremental(self, model: nn.Module, start: int = 0, **given: Any) -> Iterator[Step]:
        for step in incremental_of(self.eval_fn)(model, start=start, **given):
            self.images += int(step.images)
            yield step

    def counts(self) -> dict[str, int | None]:
        """``{"evaluations": calls, "images_evaluated": images}`` (None when unknown)."""
        known = self.per_call is not None or incremental_of(self.eval_fn) is not None
        return {"evaluations": self.calls, "images_evaluated": self.images if known else None}


def full_scores(eval_fn: Any, model: nn.Module) -> tuple[torch.Tensor | None, float]:
    """One whole incremental evaluation of ``model``: ``(scores, metric)`` (``scores``: every
    image's, in order; None for a bounded metric)."""
    parts, value, last = [], None, None
    for step in eval_fn.incremental(model, start=0):
        last = step
        if step.scores is not None:
            parts.append(step.scores.detach().double().cpu().reshape(-1))
    if last is None:
        raise MetricError("the incremental evaluation yielded nothing: is the evaluation data "
                          "empty?")
    if parts:
        scores = torch.cat(parts)
        value = last.value if last.value is not None else float(scores.mean())
        return scores, float(value)
    value = last.value if last.value is not None else last.low
    if value is None:
        raise MetricError("the incremental evaluation's last step holds no metric (value or "
                          "low/high)")
    return None, float(value)


def close_steps(steps: Any) -> None:
    """Close an incremental evaluation's steps (a generator stopped early) if they can be."""
    close = getattr(steps, "close", None)
    if close is not None:
        close()


def step_scores(step: Step) -> torch.Tensor:
    """A step's per-image scores as a flat float64 tensor; a step without them, or with another
    count than it says, is a MetricError."""
    if step.scores is None:
        raise MetricError("an incremental evaluation step of a mean metric holds no scores")
    scores = step.scores.detach().double().cpu().reshape(-1)
    if len(scores) != int(step.images):
        raise MetricError(f"an incremental evaluation step says {step.images} images but holds "
                          f"{len(scores)} scores")
    return scores
