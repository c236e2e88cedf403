"""Each group's expected loss curve, drawn from its pilots before an adaptive analysis: what
:mod:`autoprune.engine.adaptive_eta` plays the analysis's rounds against to say its cost. It only
predicts the cost: no curve here decides a point.

A pilot is a point evaluated on the first images only (:mod:`.adaptive_pilot`): every group's top
ratio, then more where one pilot says too little about the curve's shape. Through the top alone
the loss is taken to grow as the ratio to the power :data:`CURVE_POWER` (:func:`curve`). A group
losing :data:`MID_FROM` to :data:`SATURATED` at its top is also piloted :data:`MID_STEPS` ratios
lower, its curve a power through both (:func:`bent_curve`). A group losing :data:`SATURATED` or
more is piloted at the grid's lowest ratio too (a stem that loses as much at every ratio:
:func:`curve` through both); for a FLOPs or latency target, whose threshold can sit anywhere up
to tens of % loss, the grid between its pilots is bisected where neighbouring pilots' losses
differ by :data:`STEP_GAP` or more (:func:`bisected`), its curve a power between each two
(:func:`pieced_curve`).
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

import torch

from .adaptive import Planner

Curve = Callable[[float], float]

# how a group's loss grows with the ratio below its top (loss ~ ratio ** CURVE_POWER): measured
# curves through their top ratio grow with a median exponent of 2.1-4.4 (six tables of resnet18
# and mobilenetv3, 3 and 8 epochs, 1,000-10,000 images); replayed on 26 target rows of them, 2.5
# brought the images said from 14.1 % off on average (largest 45 %) to 12.0 % (36 %), the square
# having said too few on 21 of 26 (trained resnet18's FLOPs rows -10 % to -27 %); 3 said 10.4 %
# on average but put a second row outside +-30 % (benchmarks/README.md, "The estimate's curve
# power")
CURVE_POWER = 2.5
# a group losing MID_FROM to SATURATED at its top ratio is also piloted MID_STEPS below it, its
# curve a power through both (CURVE_POWER to MID_POWER): such groups often lose little until
# the last two or three ratios (trained resnet18: 0.002-0.008 up to 0.6, then 0.04 / 0.10 /
# 0.34), where one power from the top put their crossing of a 5 % tolerance at 0.45 instead of
# 0.72. Replayed on 26 target rows (benchmarks/README.md, "The estimate's second pilot"): the
# images said 12.0 % off on average -> 10.1 %, largest 36 % -> 29 %, none outside +-30 %
# (one before); the extra pilots cost 0-1 % of the analyses' images
MID_FROM, MID_STEPS, MID_POWER = 0.05, 2, 9.0
SATURATED = 0.5  # a group losing this much at its top ratio is also piloted at its lowest...
LOW_EVIDENCE = 0.1  # ...whose loss, if at least this (3 of 32 images), shapes its curve
# for a FLOPs or latency target, a saturated group's pilots are bisected where two neighbours
# lose STEP_GAP or more apart (6 of 32 images), at most STEP_PILOTS more a group: the first 12
# groups of a 3-epoch mobilenetv3 reach -20 % FLOPs at a threshold of 23 % loss, where
# conv_stem loses 4-9 % up to ratio 0.4 and 59 % at 0.5, blocks.1.0.conv_pw 0-8 % up to 0.8 and
# 75 % at 0.9; one power through the lowest and top pilots read them as losing 40 % and 26 %
# there, the play's threshold came out at 35 % and the images said 40 % too few. Replayed
# (benchmarks/README.md, "The estimate's bisected pilots"): that row -40 % -> -10 %, the 20
# FLOPs and latency rows of the 26 within 2 points of before on average (none outside +-30 %),
# the pilots +0.7 % images; a gap of 0.3 said the same, two pilots at most -20 %. Loss targets
# keep the two pilots: their cost is set by the points near a tolerance of a few %, where a
# 32-image pilot between two others reads noise (replayed: 5 of 6 loss rows worse, to -49 %)
STEP_GAP, STEP_PILOTS = 0.2, 3


def curve(top_loss: float, top: float, low_loss: float | None = None, low: float = 0.0
          ) -> Curve:
    """A group's expected loss at ratio ``r`` from its pilot: through ``top_loss`` at ``top``,
    growing as the ratio to the power :data:`CURVE_POWER`; where the group was also piloted at
    ``low`` (it loses :data:`SATURATED` or more at the top) and lost at least
    :data:`LOW_EVIDENCE` there (``low_loss``: a stem that loses nearly as much at every ratio;
    less is within a few flips of noise on 32 images), a power of the ratio through both
    points, never steeper. It only predicts the cost: resnet50's stem at 224 px (86 % lost at
    every ratio) made the ratio-squared guess expect points near the tolerance and twice the
    time."""
    power = CURVE_POWER
    if low_loss is not None and low_loss >= LOW_EVIDENCE and 0 < low < top:
        power = _power_through(top_loss, top, low_loss, low, 0.0, CURVE_POWER)
    return _power_curve(top_loss, top, power)


def bent_curve(top_loss: float, top: float, mid_loss: float, mid: float) -> Curve:
    """A group's expected loss at ratio ``r`` through its two pilots, ``top_loss`` at ``top``
    and ``mid_loss`` at ``mid``: a power of the ratio between :data:`CURVE_POWER` and
    :data:`MID_POWER` (a group losing :data:`MID_FROM` to :data:`SATURATED` at its top ratio
    often loses little but at its last two or three ratios)."""
    power = _power_through(top_loss, top, mid_loss, mid, CURVE_POWER, MID_POWER)
    return _power_curve(top_loss, top, power)


def bisected(grid: list[float], known: Mapping[float, float], loss_at: Callable[[float], float]
             ) -> dict[float, float]:
    """``known`` (ratio -> a pilot's loss) with more pilots (``loss_at(ratio)``): while two
    neighbouring pilots lose :data:`STEP_GAP` or more apart with ratios of ``grid`` between
    them, the middle one of those, the widest gap first, at most :data:`STEP_PILOTS` more."""
    known = dict(known)
    for _ in range(STEP_PILOTS):
        ratios = sorted(known)
        gaps = [(known[b] - known[a], a, b) for a, b in zip(ratios, ratios[1:])
                if known[b] - known[a] >= STEP_GAP and any(a < r < b for r in grid)]
        if not gaps:
            break
        _, a, b = max(gaps)
        inner = [r for r in grid if a < r < b]
        middle = inner[len(inner) // 2]
        known[middle] = loss_at(middle)
    return known


def pieced_curve(known: Mapping[float, float]) -> Curve:
    """A group's expected loss at ratio ``r`` through its pilots (``known``: ratio -> loss):
    between two neighbours a power of the ratio (0 to :data:`MID_POWER`: never falling, a loss
    of 0 read as 1e-6), outside them the nearest pilot's loss."""
    ratios = sorted(known)
    pieces = [(a, b, _power_curve(known[b], b, _power_through(known[b], b, known[a], a, 0.0,
                                                              MID_POWER)))
              for a, b in zip(ratios, ratios[1:])]

    def loss(r: float) -> float:
        for a, b, piece in pieces:
            if a <= r <= b:
                return piece(r)
        return known[ratios[0]] if r < ratios[0] else known[ratios[-1]]
    return loss


def pilot_curves(names: list[str], planner: Planner, loss_at: Callable[[str, float], float],
                 pilot_lows: bool = True, pilot_mids: bool = False, pilot_steps: bool = False
                 ) -> tuple[dict[str, Curve], dict[str, float]]:
    """Each group's expected loss curve from ``loss_at(group, ratio)``, a pilot of its top
    ratio, and of its lowest where the top loses :data:`SATURATED` or more (and ``pilot_lows``:
    :func:`curve`; with ``pilot_steps`` too, the grid between them :func:`bisected`:
    :func:`pieced_curve`), or of the ratio :data:`MID_STEPS` below the top where it loses
    :data:`MID_FROM` to :data:`SATURATED` (and ``pilot_mids``: :func:`bent_curve`); and the
    saturated groups' low losses."""
    low, top = planner.grid[0], planner.grid[-1]
    mid = planner.grid[-1 - MID_STEPS] if len(planner.grid) > MID_STEPS else None
    with torch.no_grad():
        losses = {name: loss_at(name, top) for name in names}
        lows = {name: loss_at(name, low) for name in names  # a curve that may be flat
                if pilot_lows and losses[name] >= SATURATED and low < top}
        mids = {name: loss_at(name, mid) for name in names  # a curve that may bend late
                if pilot_mids and mid is not None and MID_FROM <= losses[name] < SATURATED}
        steps = {name: bisected(planner.grid, {low: lows[name], top: losses[name]},
                                lambda r, name=name: loss_at(name, r))  # where it turns
                 for name in lows if pilot_steps}
    return {n: pieced_curve(steps[n]) if n in steps else
            bent_curve(losses[n], top, mids[n], mid) if n in mids else
            curve(losses[n], top, lows.get(n), low) for n in names}, lows


def _power_through(top_loss: float, top: float, loss: float, ratio: float, lowest: float,
                   highest: float) -> float:
    """The power of the ratio whose curve through ``top_loss`` at ``top`` passes ``loss`` at
    ``ratio`` (a loss of 0 read as 1e-6), clamped to ``lowest`` ... ``highest``."""
    power = math.log(max(top_loss, 1e-6) / max(loss, 1e-6)) / math.log(top / ratio)
    return min(highest, max(lowest, power))


def _power_curve(top_loss: float, top: float, power: float) -> Curve:
    """The loss at ratio ``r``: ``top_loss`` at ``top``, growing as the ratio to ``power``."""
    return lambda r: top_loss * (r / top) ** power
