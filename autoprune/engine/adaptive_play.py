"""The rounds of an adaptive analysis played against assumed loss curves instead of measured
points (what the estimate said before an analysis predicts with, :mod:`.adaptive_eta`):
:func:`play_rounds` on smooth curves, :func:`rough_rounds` on those curves plus each point's
roughness, as measured curves have it.

A measured curve is not smooth: a pruned point's loss moves by a few images' loss from one
ratio to the next (Unet-resnet18 on 160 images: ten of its twelve groups lose -0.006 to +0.005
at every ratio). Where a group's curve is that small, a FLOPs target's common threshold lies in
that noise and the analysis walks the group point by point, which a smooth curve through its
top ratio does not (20 points predicted, 34 measured; the measured table's own curves played
give 34). Played with seeded normal noise on every point but the top ratio (the pilot's), the
pilots' curves predict 29, and the count hardly depends on the noise's sd (0.001-0.03: a
threshold set by the noise scales with it). On curves that are a sine of the ratio around zero
(eight such groups and a real one, ten phases, `-30 %` / `-50 %` FLOPs) the real analysis
measured 16.7 / 21.4 points, smooth curves said 14.2 / 17.8, rough ones 19.7 / 21.1; on groups
that really lose (YOLOv8n on 160 images) the noise changes the count by 0-1 point of 31-77.
Top-1 curves are played rough too since 2026-11-30: replayed on 25 FLOPs and latency rows of
resnet18 and mobilenetv3 (32 and 224 px, 1,000 and 2,000 images), the images said came within
+-30 % on 20 rows instead of 17 (mean error 17 % instead of 20 %), loss targets' errors within
9 points of before; the eight plays cost less than one had, each look's interval computed once
(:func:`~.adaptive_eta.expected_measure`'s memo).
"""
from __future__ import annotations

import random
from typing import Callable, Mapping

from .adaptive import (COARSE, MAX_ROUNDS, Interval, Planner, Thresholds, next_round,
                       round_points)
from .store import ratio_key

ROUGHNESS = 0.003  # the sd of a point's loss about its group's smooth curve (a few images' loss)
ROUGH_PLAYS = 8  # plays averaged, each with its own seeded roughness

Measure = Callable[[float, list[float]], tuple[int, Interval]]


def play_rounds(curves: Mapping[str, Callable[[float], float]], planner: Planner,
                thresholds: Thresholds, measure: Measure | Mapping[str, Measure],
                known: Mapping[str, Mapping[float, Interval]] | None = None
                ) -> dict[tuple[str, float], int]:
    """The points an adaptive analysis measures if each group's loss at ratio ``r`` is
    ``curves[group](r)``, and the images each ends with (``measure(loss, thresholds)``, or
    ``measure[group](...)``: the images and the interval a point of that loss is decided
    with): the rounds of :class:`~autoprune.engine.adaptive_run.AdaptiveRun` (a FLOPs / latency
    target's coarse probe against :data:`~.adaptive.COARSE`, then thresholds estimated from the
    table of interval middles, or of upper ends once those leave no work, widened while they
    move; one point per group a round, a point an interval no longer decides refined), from
    the points already ``known``."""
    table = {g: dict((known or {}).get(g, {})) for g in curves}
    images: dict[tuple[str, float], int] = {}

    def point(name: str, ratio: float, ts: list[float]) -> None:
        of = measure[name] if isinstance(measure, Mapping) else measure
        n, table[name][ratio] = of(curves[name](ratio), ts)
        images[(name, ratio)] = max(images.get((name, ratio), 0), n)

    if thresholds.target.kind != "loss":
        for name in curves:
            if not table[name]:
                point(name, planner.first(), list(COARSE))
    previous: list[float] = []
    for _ in range(MAX_ROUNDS):
        now, work = next_round(thresholds, planner, table)
        if not work:
            break
        ts = sorted(set(now) | set(previous))
        for name, ratio in round_points(planner, table, work, ts).items():
            point(name, ratio, ts)
        previous = now
    return images


def rough_rounds(curves: Mapping[str, Callable[[float], float]], planner: Planner,
                 thresholds: Thresholds, measure: Measure | Mapping[str, Measure],
                 known: Mapping[str, Mapping[float, Interval]] | None = None,
                 sigma: float | None = None, plays: int = ROUGH_PLAYS
                 ) -> list[dict[tuple[str, float], int]]:
    """The plans of ``plays`` plays of :func:`play_rounds`, each point's loss its curve's plus
    seeded normal noise of sd ``sigma`` (:data:`ROUGHNESS`; the same point the same within a
    play), but at the grid's top ratio, where the pilot read the curve; one play where
    ``sigma`` is 0."""
    sigma = ROUGHNESS if sigma is None else sigma
    plays, top = (plays if sigma > 0 else 1), planner.grid[-1]
    plans = []
    for seed in range(plays):
        rng, noise = random.Random(seed), {}

        def rough(name: str, smooth: Callable[[float], float]) -> Callable[[float], float]:
            def loss(r: float) -> float:
                key = ratio_key(r)
                if key == top:  # where the pilot read the curve
                    return smooth(r)
                return smooth(r) + noise.setdefault((name, key), rng.gauss(0.0, sigma))
            return loss

        plans.append(play_rounds({n: rough(n, c) for n, c in curves.items()}, planner,
                                 thresholds, measure, known))
    return plans
