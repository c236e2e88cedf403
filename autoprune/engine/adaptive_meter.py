"""One point of an adaptive analysis (:mod:`autoprune.engine.adaptive` says which points and why):
its images evaluated until its loss interval (:mod:`autoprune.engine.bounds`) lies wholly below
or above every threshold that matters, or every image is seen; a point stopped early is
returned with its interval, images used and bound, and continued from its counts when a later
analysis needs it refined (or from the estimate's pilot of the same point: the counts are looked
at first, as they would have been after the step that ended there)."""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch
import torch.nn as nn

from ..errors import MetricError
from .adaptive import Interval, undecided
from .bounds import PairedCounts, look_points, mean_interval
from .incremental import close_steps, step_scores
from .points import relative_loss


class PointMeter:
    """Evaluates a point's images until its loss is decided against the thresholds.

    ``eval_fn.incremental`` gives the steps; ``base``: the unpruned model's score of every
    image (None for a bounded metric, whose steps carry sure ``low``/``high``)."""

    def __init__(self, eval_fn: Any, base: torch.Tensor | None, total: int, baseline: float,
                 higher_is_better: bool, *, bound: str, confidence: float, resumable: bool,
                 random_order: bool):
        self.eval_fn, self.base, self.total = eval_fn, base, total
        self.baseline, self.higher_is_better = baseline, higher_is_better
        self.resumable = resumable  # continued from a point's counts (scores) or state (bounded)
        self.bound = bound if (random_order and base is not None) else "exact"
        self.binary = base is not None and bool(((base == 0) | (base == 1)).all())
        self.confidence = confidence
        self.looks = look_points(total)
        self.alpha = (1.0 - confidence) / (4 * max(1, len(self.looks)))

    def loss_interval(self, low: float, high: float) -> Interval:
        """The relative-loss interval of a metric known to lie in ``[low, high]``."""
        a = relative_loss(self.baseline, low, self.higher_is_better)
        b = relative_loss(self.baseline, high, self.higher_is_better)
        return (min(a, b), max(a, b))

    def measure(self, model: nn.Module, thresholds: list[float],
                before: Mapping[str, Any] | None = None,
                where: tuple[str, float] = ("?", 0.0)) -> dict[str, Any]:
        """``{"loss"}`` for a point seen on every image, else its interval: ``{"low", "high",
        "images", "of", "bound", ...}`` (see :mod:`autoprune.engine.store`)."""
        if self.base is not None:
            return self._mean(model, thresholds, before)
        return self._bounded(model, thresholds, before)

    def _mean(self, model: nn.Module, thresholds: list[float],
              before: Mapping[str, Any] | None) -> dict[str, Any]:
        counts = PairedCounts()
        if before and self.resumable and isinstance(before.get("counts"), Mapping):
            counts = PairedCounts.of(before["counts"])
        binary = self.binary and bool(before.get("binary", True) if before else True)
        looks = [n for n in self.looks if n > counts.seen]
        interval: Interval = (-math.inf, math.inf)
        if self.looks and self.looks[0] <= counts.seen < self.total:  # continued past a look
            # (a pilot's or an earlier session's counts): look at them before evaluating more
            interval = self.interval(counts, binary)
            if not undecided(interval, thresholds):
                return self._stopped(counts, interval, thresholds, binary)
        steps = self.eval_fn.incremental(model, start=counts.seen)
        try:
            for step in steps:
                scores = step_scores(step)
                n = len(scores)
                counts.add(scores, self.base[counts.seen:counts.seen + n])
                binary = binary and bool(((scores == 0) | (scores == 1)).all())
                if counts.seen >= self.total:
                    break
                if looks and counts.seen >= looks[0]:
                    while looks and counts.seen >= looks[0]:
                        looks.pop(0)
                    interval = self.interval(counts, binary)
                    if not undecided(interval, thresholds):
                        break
        finally:
            close_steps(steps)
        if counts.seen >= self.total:
            return {"loss": relative_loss(self.baseline, counts.score / self.total,
                                          self.higher_is_better)}
        if counts.seen < 1 or not math.isfinite(interval[0]):
            raise MetricError(f"the incremental evaluation stopped after {counts.seen} of "
                              f"{self.total} images: it must cover every image")
        return self._stopped(counts, interval, thresholds, binary)

    def interval(self, counts: PairedCounts, binary: bool) -> Interval:
        """The loss interval the images counted so far give (:func:`mean_interval`)."""
        low, high = mean_interval(counts, self.base, bound=self.bound, alpha=self.alpha,
                                  binary=binary)
        return self.loss_interval(low, high)

    def _stopped(self, counts: PairedCounts, interval: Interval, thresholds: list[float],
                 binary: bool) -> dict[str, Any]:
        """A point decided early: its interval, images used and bound."""
        out = {"low": interval[0], "high": interval[1], "images": counts.seen,
               "of": self.total, "bound": self.bound if binary else "exact",
               "decided_for": list(thresholds), "counts": counts.to_json()}
        if out["bound"] == "confidence":
            out["confidence"] = self.confidence
        if not binary:
            out["binary"] = False
        return out

    def _bounded(self, model: nn.Module, thresholds: list[float],
                 before: Mapping[str, Any] | None) -> dict[str, Any]:
        seen, interval, value, state = 0, None, None, None
        if before and (int(before.get("seen", 0)) >= self.total or  # a pilot of every image,
                       (self.resumable and before.get("state") is not None)):  # or its steps,
            seen, state = int(before["seen"]), before.get("state")  # looked at as after its last
            low, high = float(before["low"]), float(before["high"])
            if seen >= self.total:
                value = low  # it saw every image: low == high, the metric
            else:
                interval = self.loss_interval(low, high)
                if not undecided(interval, thresholds):
                    return self._bounded_stop(interval, seen, thresholds)
        if value is None:
            steps = self.eval_fn.incremental(model, start=seen,
                                             **({"state": state} if seen else {}))
            try:
                for step in steps:
                    seen += int(step.images)
                    if step.low is None or step.high is None:
                        raise MetricError("an incremental evaluation step holds neither scores "
                                          "nor low/high bounds of the metric")
                    if seen >= self.total:
                        value = step.value if step.value is not None else step.low
                        break
                    interval = self.loss_interval(float(step.low), float(step.high))
                    if not undecided(interval, thresholds):
                        break
            finally:
                close_steps(steps)
        if value is not None:
            return {"loss": relative_loss(self.baseline, float(value), self.higher_is_better)}
        if interval is None:
            raise MetricError(f"the incremental evaluation stopped after {seen} of {self.total} "
                              f"images: it must cover every image")
        return self._bounded_stop(interval, seen, thresholds)

    def _bounded_stop(self, interval: Interval, seen: int, thresholds: list[float]
                      ) -> dict[str, Any]:
        """A bounded metric's point decided early: its interval and images used."""
        return {"low": interval[0], "high": interval[1], "images": seen, "of": self.total,
                "bound": "exact", "decided_for": list(thresholds)}
