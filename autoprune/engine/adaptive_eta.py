"""What an adaptive analysis will evaluate, predicted before its points: a pilot (each group's top
ratio evaluated on the first look's images, 32, in whole evaluation steps: 64 or 128 with those
batches), a curve through it, and the analysis's own planner and bound run against that curve.

An adaptive analysis's cost depends on how sensitive the groups are: a loss target measures each
group from the top ratio down until a point is decided within the tolerance (a group that loses
nothing even at the top ratio costs one point, a sensitive one a point for every ratio over the
tolerance); a FLOPs or latency target finds each group's bracket of a common threshold that the
table itself sets (:mod:`autoprune.engine.adaptive`). A fixed prior misses that by up to 2x
between models and sizes (resnet18 against mobilenetv3_large_100, 1,000 against 5,000 images).
So, per group, the pilots' flips give the top ratio's loss and a curve below it
(:mod:`.adaptive_curves`: a power of the ratio through the top, bent or pieced through more
pilots where the top loses 5 % or more; it only predicts the cost, it decides nothing); then
the rounds of :class:`~autoprune.engine.adaptive_run.AdaptiveRun` are played against those
curves with the real :class:`~autoprune.engine.adaptive.Planner` and
:class:`~autoprune.engine.adaptive.Thresholds`, each point charged the images the bound needs to
decide a point of its loss against the round's thresholds, its flips arriving at their expected
rate (:func:`expected_measure`), and each point's roughness added (:mod:`.adaptive_play`: a
measured curve moves by a few images' loss from one ratio to the next, and a FLOPs threshold of
that size walks such groups point by point, which a smooth curve does not). It returns which
points and how many images each, so the ETA also weighs each point's own cost (a top ratio
computes less than the unpruned model), and the pilots themselves (:mod:`.adaptive_pilot`),
which the analysis continues when it measures those points.
A metric that is not a mean over images (mAP, mIoU: sure bounds, no flips to count) is piloted
by its value on the first look's images, pruned against unpruned (:func:`pilot_seen`; the
pruned pilots handed on where the evaluation continues from a step's state: mIoU), and
its points charged every image: what a fixed prior missed there was how many points (YOLOv8n's
loss target measured 77 of 108 where the prior expected half). Its rounds are played rough
too: a barely trained Unet's groups lose nothing but noise.
"""
from __future__ import annotations

import functools
import math
import time
from typing import Any, Callable, Iterable, Mapping

import torch.nn as nn

from .adaptive import Interval, Planner, Thresholds, undecided
from .adaptive_curves import MID_FROM, pilot_curves
from .adaptive_meter import PointMeter
from .adaptive_pilot import PILOT_IMAGES, Pilot, pilot_loss, pilot_seen
from .adaptive_play import rough_rounds
from .bounds import PairedCounts, mean_interval
from .points import eval_mode, relative_loss


def expected_measure(meter: PointMeter, loss: float, thresholds: float | Iterable[float],
                     first: Iterable[tuple[float, Interval, int]] = (), step: int = 1,
                     memo: dict[tuple[int, int], Interval] | None = None
                     ) -> tuple[int, Interval]:
    """``(images, interval)``: where ``meter``'s bound stops a point of true relative ``loss``
    against ``thresholds`` and the loss interval it then records, its flips (baseline right,
    pruned wrong) arriving at their expected rate: the first look whose interval leaves every
    threshold out, else every image (the loss itself); in evaluation steps of ``step`` images
    (the meter looks at the end of a step that passes a look). ``first``: ``(loss, interval,
    images)`` of pilots of the point's group (:func:`first_looks`); at the looks within their
    images the interval is that of the pilot nearest in loss (every point sees the same first
    images). ``memo``: the intervals computed so far, by images seen and down flips (the
    bound's arithmetic is most of a play's time, and its looks' counts recur across a play's
    points and rounds)."""
    thresholds = [thresholds] if isinstance(thresholds, (int, float)) else list(thresholds)
    memo = {} if memo is None else memo
    early = min(first, key=lambda f: abs(f[0] - loss), default=None)
    base = meter.base
    right = float((base > 0.5).sum()) if base is not None else 0.0
    if right == 0:
        return meter.total, (loss, loss)
    share_right = right / meter.total
    flips = max(0.0, loss) * float(base.sum())  # flips over the whole set
    for n in step_looks(meter.looks, step, meter.total):
        if early is not None and n <= early[2]:
            interval = early[1]
        else:
            seen1 = round(n * share_right)
            down = round(flips * seen1 / right)
            interval = memo.get((n, down))
            if interval is None:
                counts = PairedCounts(seen=n, score=float(seen1 - down), down=down, up=0,
                                      seen1=seen1, seen0=n - seen1)
                low, high = mean_interval(counts, base, bound=meter.bound, alpha=meter.alpha,
                                          binary=meter.binary)
                interval = memo[(n, down)] = meter.loss_interval(low, high)
        if not undecided(interval, thresholds):
            return n, interval
    return meter.total, (loss, loss)


def step_looks(looks: list[int], step: int, total: int) -> list[int]:
    """The image counts at which a meter evaluating ``step`` images at a time computes an
    interval: the end of each step that passes one of ``looks`` (before the last image)."""
    out: list[int] = []
    for n in looks:
        end = -(-n // max(1, step)) * max(1, step)
        if end < total and (not out or end > out[-1]):
            out.append(end)
    return out


def expected_loss(counts: PairedCounts) -> float:
    """A pilot's expected relative loss from its flips: the rate of down flips among the images
    the unpruned model gets right, less that of up flips among those it gets wrong (scaled to
    the right ones), each with half a flip added (Jeffreys' estimate: no flip in 32 images says
    a rate is small, not zero); at least 0. A point's loss is net of its up flips, so a pilot
    that flips nothing either way says about nothing: half a flip down alone (the estimate
    until 2026-11-29) read such a group as losing 0.009 on 64 images, and a FLOPs target's play
    walked four of resnet18's groups, which lose nothing (-0.002 ... 0 on 1,000 images), down
    four ratios each (images said +46 %). Replayed on 24 targets (12 on base models held out),
    the mean error of the images said 15.0 % -> 14.2 %, the largest 46 % -> 42 %."""
    if not counts.seen1:
        return 0.0
    down = (counts.down + 0.5) / (counts.seen1 + 1.0)
    up = (counts.up + 0.5) / (counts.seen0 + 1.0) * counts.seen0 / counts.seen1
    return max(0.0, down - up)


def first_looks(meter: PointMeter, pilots: Iterable[Pilot]
                ) -> list[tuple[float, Interval, int]]:
    """``(loss, interval, images)`` of each of a group's ``pilots``: for a group losing
    :data:`~.adaptive_curves.SATURATED` or more at its top ratio, whose curve is taken as
    nearly flat between its two pilots, the intervals its points will have on the same first
    images. Expected counts there miss what those images hold: resnet50's stem at 224 px on a
    44 %-accurate base model lost 0.69 at every ratio, yet on the first 64 images its points
    flipped 19 images down and 6 up, undecided against a 5 % tolerance (as its low pilot was),
    and each needed a second evaluation step where expected down flips decide at the first."""
    return [(expected_loss(p.counts), meter.interval(p.counts, p.binary), p.seen)
            for p in pilots]


def predictable(meter: Any) -> bool:
    """True where the bound's stopping can be predicted: per-image top-1 scores (0 / 1) under
    the confidence bound."""
    return isinstance(meter, PointMeter) and meter.base is not None and \
        meter.bound == "confidence" and meter.binary


def predicted_shares(meter: PointMeter, runner: Any, model: nn.Module, names: list[str],
                     planner: Planner, thresholds: Thresholds, points: int,
                     known: Mapping[str, Mapping[float, Interval]] | None = None
                     ) -> dict[str, Any] | None:
    """The expected share of ``points`` (the full analysis's) and of each point's images that
    the adaptive analysis of ``names`` evaluates, and the points themselves (``predicted``: (group,
    ratio) -> images), predicted from a pilot of each group's top ratio: its flips where the
    bound's stops can be predicted (:func:`predictable`), else, for a bounded metric whose steps
    say the metric of the images seen (:func:`pilot_seen`), its loss on those images, every
    point then charged every image; None where neither can be read."""
    if not names or not isinstance(meter, PointMeter):
        return None
    if predictable(meter):
        return _from_flips(meter, runner, model, names, planner, thresholds, points, known)
    if meter.base is None:
        return _from_seen_metric(meter, runner, model, names, planner, thresholds, points, known)
    return None


def _from_flips(meter: PointMeter, runner: Any, model: nn.Module, names: list[str],
                planner: Planner, thresholds: Thresholds, points: int,
                known: Mapping[str, Mapping[float, Interval]] | None) -> dict[str, Any]:
    """:func:`predicted_shares` from per-image top-1 flips: each point charged the images the
    bound needs for a point of its expected loss, its pilot's images handed on."""
    low, top = planner.grid[0], planner.grid[-1]
    pilots: dict[tuple[str, float], Pilot] = {}

    def pilot(name: str, ratio: float) -> float:
        with runner.pruned(name, ratio) as pruned:
            if not pruned:
                return 0.0
            done = pilots[(name, ratio)] = pilot_loss(meter, model)
            return expected_loss(done.counts)

    curves, lows = pilot_curves(names, planner, pilot, pilot_mids=True,
                                pilot_steps=thresholds.target.kind != "loss")
    step = min((p.step for p in pilots.values() if p.step), default=1)  # images a step
    first = {n: first_looks(meter, [pilots[(n, top)], pilots[(n, low)]]) for n in lows
             if (n, top) in pilots and (n, low) in pilots}  # a saturated group's first step
    memo: dict[tuple[int, int], Interval] = {}  # a look's interval by its counts, shared
    measure = {n: functools.partial(expected_measure, meter, step=step, first=first.get(n, ()),
                                    memo=memo) for n in names}
    step_of = {key: p.seen for key, p in pilots.items()}  # handed on where measured
    # played rough: a FLOPs threshold of a few images' loss walks noise-level groups point by
    # point, which smooth curves miss (replayed, 25 FLOPs and latency rows: the images said
    # within +-30 % on 20 rows, not 17; mean error 17 %, not 20 %; loss targets as before)
    shares = averaged(rough_rounds(curves, planner, thresholds, measure, known), points,
                      meter.total, step_of, 0,
                      lambda plan, given: sum(bound_looks(meter.looks, given.get(key, 0), n,
                                                          step, meter.total)
                                              for key, n in plan.items()))
    seen = max((p.seen for p in pilots.values()), default=PILOT_IMAGES)
    lower = sum(ratio != top for _, ratio in pilots)  # a bent or turning curve's
    more = f", {lower} lower ratio{'s' * (lower != 1)} of the groups losing {MID_FROM:.0%} or " \
        "more" if lower else ""
    return {**shares, "pilot": f"each group's top ratio on {seen} images{more}",
            "pilots": pilots, "look_seconds": look_seconds(meter)}


def averaged(plans: list[dict[tuple[str, float], int]], points: int, total: int,
             pilots: Mapping[tuple[str, float], int], extra: int,
             looks_of: Callable[[dict, dict], int]) -> dict[str, Any]:
    """What the plays' ``plans`` (:func:`~.adaptive_play.rough_rounds`) predict, averaged:
    the share of the full analysis's ``points`` and of a point's ``total`` images evaluated,
    each point's mean images (``predicted``) and pilot images handed on (``handed_on``: of
    ``pilots``, those whose point a plan measures; the others evaluated for nothing, as are
    ``extra`` images), the looks at which the bound is computed (``looks_of(plan, handed)``)
    and the mean count of points (``points_expected``)."""
    k = max(1, len(plans))
    predicted: dict[tuple[str, float], float] = {}
    handed: dict[tuple[str, float], float] = {}
    images = looks = count = 0.0
    for plan in plans:
        given = {key: n for key, n in pilots.items() if key in plan}
        images += sum(max(n, given.get(key, 0)) for key, n in plan.items()) + extra \
            + sum(n for key, n in pilots.items() if key not in given)
        looks += looks_of(plan, given)
        count += len(plan)
        for key, n in plan.items():
            predicted[key] = predicted.get(key, 0.0) + n / k
        for key, n in given.items():
            handed[key] = handed.get(key, 0.0) + n / k
    return {"points_share": min(1.0, count / k / max(1, points)),
            "image_share": images / max(1.0, count * total), "predicted": predicted,
            "handed_on": handed, "looks": looks / k, "points_expected": count / k}


def _from_seen_metric(meter: PointMeter, runner: Any, model: nn.Module, names: list[str],
                      planner: Planner, thresholds: Thresholds, points: int,
                      known: Mapping[str, Mapping[float, Interval]] | None
                      ) -> dict[str, Any] | None:
    """:func:`predicted_shares` for a bounded metric (mAP, mIoU): the unpruned model and each
    group's top ratio evaluated on the first look's images (:data:`PILOT_IMAGES`; a tenth of
    the images if fewer; in whole steps), a point's loss read as that of their metrics on those
    images (Unet-resnet18's twelve top ratios on 32 images read 0.293 / 0.027 / 0.004 where 160
    images gave 0.293 / 0.027 / 0.005; on 16 images it predicts the same points), the rounds
    played with each point's roughness (:func:`rough_rounds`: most of such a model's groups may
    lose nothing but noise); every point charged every image (a sure bound decides early only
    points far over a threshold, after most of their images: a tenth fewer, measured), the
    pruned pilots handed on where the evaluation continues from a step's state (mIoU; else
    such an evaluation starts from its first image: they cost at most a tenth of a point a
    group, a hundredth on 5,000 images). On a set too small for a look (32 images or fewer:
    no point stops early), or where the unpruned pilot stopped before the first look (at 32)
    without a metric (33-159 images: twice a tenth of them is under 32; such pilots said
    nothing and the ETA fell back on a fixed prior), each pilot sees every image and is
    handed on as the point itself, the unpruned metric the analysis's baseline: YOLOv8n's 32
    val images said no metric at a tenth of them, and its loss target's ETA fell back on a
    prior that expected 54 points for 77. None where the steps of a larger set say no metric,
    or it is 0 unpruned."""
    images = min(PILOT_IMAGES, max(1, meter.total // 10))
    whole = not meter.looks  # a set too small for a look: every point sees every image, so a
    if whole:  # pilot of all is the point, handed on, and the unpruned metric the baseline
        images, spent, base = meter.total, 0, meter.baseline
    else:
        with eval_mode(model), runner.folded():
            spent, base, _ = pilot_seen(meter, model, images)
        if base is None and 2 * images < meter.looks[0]:  # a pilot too short for a look
            whole, images, base = True, meter.total, meter.baseline  # (33-159 images)
    if not base:
        return None
    evaluated, pilots = [spent], {}  # images not handed on; pilots handed on

    def pilot(name: str, ratio: float) -> float:
        with runner.pruned(name, ratio) as pruned:
            if not pruned:
                return 0.0
            n, value, handed = pilot_seen(meter, model, images)
        if handed is not None:
            pilots[(name, ratio)] = handed
        else:
            evaluated.append(n)
        return max(0.0, relative_loss(base, value, meter.higher_is_better)) \
            if value is not None else 0.0

    # a whole-set pilot is a whole point: a saturated group's lowest ratio, which a loss
    # target's scan may not reach, is not piloted (YOLOv8n: 5 to 8 points for nothing)
    curves, _ = pilot_curves(names, planner, pilot, pilot_lows=not whole)
    # played rough: noise-level groups walk point by point
    plans = rough_rounds(curves, planner, thresholds,
                         lambda loss, ts: (meter.total, (loss, loss)), known)
    seen = max([*evaluated, *(p.seen for p in pilots.values())])
    return {**averaged(plans, points, meter.total, {key: p.seen for key, p in pilots.items()},
                       sum(evaluated), lambda plan, given: 0),
            "pilot": f"each group's top ratio, the metric of its first {seen} images",
            "pilots": pilots, "look_seconds": 0.0}


def bound_looks(looks: list[int], start: int, end: int, step: int, total: int) -> int:
    """How often the meter computes a point's interval while it goes from ``start`` images (a
    pilot's, looked at first when past a look) to ``end`` of ``total``, in evaluation steps of
    ``step``: once at each step that passes a look (not at the last image: the point is then
    exact; a pilot evaluates whole steps, so ``start`` is a step's end)."""
    looked = int(0 < start < end and bool(looks) and looks[0] <= start)
    return looked + sum(start < n <= end for n in step_looks(looks, step, total))


def look_seconds(meter: PointMeter) -> float:
    """Seconds the meter's bound takes at one look, timed at a look a quarter of the way into
    the images on counts of a point losing 5 % with flips both ways (where the joint bound on
    the net flips works hardest: tens of ms at 50,000 images, a few at 1,000)."""
    if not meter.looks or meter.base is None:
        return 0.0
    n = min(meter.looks, key=lambda k: abs(k - meter.total / 4))
    right = float((meter.base > 0.5).sum())
    seen1 = round(n * right / meter.total)
    down = max(2, round(0.08 * seen1))
    up = min(n - seen1, down // 2)
    counts = PairedCounts(seen=n, score=float(seen1 - down + up), down=down, up=up,
                          seen1=seen1, seen0=n - seen1)
    best = math.inf
    for _ in range(2):
        start = time.perf_counter()
        mean_interval(counts, meter.base, bound=meter.bound, alpha=meter.alpha,
                      binary=meter.binary)
        best = min(best, time.perf_counter() - start)
    return best
