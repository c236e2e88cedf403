"""Pilots: points evaluated on their first images before an adaptive analysis, by the estimate
that says its cost (:mod:`autoprune.engine.adaptive_eta` reads their loss), and handed on to the
analysis, which continues each from where its pilot stopped when it measures the same point
(:meth:`Pilot.before`, :meth:`BoundedPilot.before`, as :meth:`PointMeter.measure` takes them), so
their images are not evaluated twice: top-1's paired flips (:class:`Pilot`), a bounded metric's
running state where its evaluation can continue from one (:class:`BoundedPilot`: mIoU), or its
metric where it saw every image (any bounded metric)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.nn as nn

from .adaptive_meter import PointMeter
from .bounds import PairedCounts
from .incremental import close_steps, step_scores

PILOT_IMAGES = 32  # the first look: a point decided far over the tolerance stops there anyway


@dataclass
class Pilot:
    """A point evaluated on its first images (whole evaluation steps) before the analysis, its
    flips against the unpruned model's per-image top-1 (``counts``; ``binary``: every score 0 or
    1), which the analysis continues from when it measures the same point (:meth:`before`), so
    those images are not evaluated twice; ``step``: the images of the evaluation's first step."""

    counts: PairedCounts
    binary: bool
    step: int = 0

    @property
    def seen(self) -> int:
        return self.counts.seen

    @property
    def right(self) -> int:
        """The images seen that the unpruned model gets right."""
        return self.counts.seen1

    @property
    def loss(self) -> float:
        """The relative loss over the images seen."""
        return 1.0 - self.counts.score / self.right if self.right else 0.0

    def before(self) -> dict[str, Any]:
        """The point as :meth:`PointMeter.measure` continues it."""
        return {"counts": self.counts.to_json(), "binary": self.binary}


def pilot_loss(meter: PointMeter, model: nn.Module, images: int = PILOT_IMAGES) -> Pilot:
    """``model`` (a point, pruned) evaluated on its first ``images`` images or more (whole
    evaluation steps), against the unpruned model's 0 / 1 scores of the same images."""
    counts, binary, first = PairedCounts(), True, 0
    steps = meter.eval_fn.incremental(model, start=0)
    try:
        for step in steps:
            scores = step_scores(step)
            counts.add(scores, meter.base[counts.seen:counts.seen + len(scores)])
            binary = binary and bool(((scores == 0) | (scores == 1)).all())
            first = first or len(scores)
            if counts.seen >= images:
                break
    finally:
        close_steps(steps)
    return Pilot(counts, binary, first)


@dataclass
class BoundedPilot:
    """A point of a bounded metric (mIoU) evaluated on its first ``seen`` images by the estimate:
    its last step's sure ``low``/``high`` of the metric (equal, the metric, where that step was
    the last) and running ``state``, which the analysis continues from when it measures the
    same point (:meth:`before`); no state where it saw every image (any bounded metric: mAP on
    a set too small for a look)."""

    seen: int
    low: float
    high: float
    state: Any

    def before(self) -> dict[str, Any]:
        """The point as :meth:`PointMeter.measure` continues it."""
        return {"seen": self.seen, "low": self.low, "high": self.high, "state": self.state}


def pilot_seen(meter: PointMeter, model: nn.Module, images: int
               ) -> tuple[int, float | None, BoundedPilot | None]:
    """``(images evaluated, metric, pilot)``: ``model`` evaluated on its first ``images``
    images, to the first step past them that says the metric of the images seen (``Step.seen``:
    a detection evaluation says it at its looks), or the whole evaluation's value where it ends
    first; the metric None where no step within twice ``images`` says one; ``pilot``: the last
    step, to continue from, where the evaluation is resumable and that step has a state, or
    the point itself where it saw every image (handed on: it is not measured again)."""
    seen, saying, last = 0, None, None  # the last step that says a metric; the last step
    steps = meter.eval_fn.incremental(model, start=0)
    try:
        for last in steps:
            seen += int(last.images)
            if last.value is not None or last.seen is not None:
                saying = last
            if last.value is not None or seen >= 2 * images or \
                    (seen >= images and last.seen is not None):
                break
    finally:
        close_steps(steps)
    pilot = None
    if meter.resumable and last is not None and last.state is not None and \
            last.low is not None and last.high is not None:
        pilot = BoundedPilot(seen, float(last.low), float(last.high), last.state)
    elif last is not None and last.value is not None and seen >= meter.total:
        pilot = BoundedPilot(seen, float(last.value), float(last.value), None)  # the point
    if saying is None:
        return seen, None, pilot
    return seen, float(saying.value if saying.value is not None else saying.seen_metric()), pilot
