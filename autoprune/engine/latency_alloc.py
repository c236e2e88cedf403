"""Allocations on a latency-timed sensitivity table: per group, the points (ratio, loss, latency
saved) of a table timed with ``sensitivity(..., latency=True)``, and two ways of choosing ratios
whose summed table saving is a goal.

- Greedy (:func:`greedy_path`, :func:`allocation`): again and again, the step of any group with
  the least loss per latency saved (looking ahead over all of a group's larger measured ratios,
  so a flat stretch of a loss curve is seen as one cheap step). Each group's savings are first
  made non-decreasing in the ratio (isotonic regression: a noisy point that measured more saving
  than a larger ratio is averaged with it, not believed). The groups' savings do not add up (a
  conv's cost is the product of its input and output widths, so two groups pruned together save
  less than the sum): a group's saving is discounted by the share of its layers' MACs that the
  groups pruned before left (:class:`Overlap`).
- One loss threshold for every group (PaddleSlim's, :func:`threshold_allocation`).

:mod:`autoprune.engine.latency_target` brings them to a *measured* latency target.
"""
from __future__ import annotations

from typing import Any, Mapping

from .allocate import (FlopsModel, isotonic, loss_curve, ratio_for_loss, read_curve,
                       threshold_curve)
from .channels import channels_to_keep
from .store import SensitivityRecord

Step = tuple[str, float, float, float]  # group, ratio, loss added, share of latency saved
Table = Mapping[str, list[tuple[float, float, float]]]  # what :func:`curves` returns


def curves(record: SensitivityRecord, max_loss: float | None = None
           ) -> dict[str, list[tuple[float, float, float]]]:
    """Per group, ``[(ratio, loss, saved)]`` from (0, 0, 0) over the points that have both a loss
    and a latency; ``saved`` = 1 - pruned / unpruned latency. Losses are fitted non-decreasing
    (:func:`~.allocate.loss_curve`: pruning more never counts as less harmful), savings too
    (isotonic regression over the group's timed points, at least 0: timing noise is averaged
    out, not believed); points over ``max_loss`` are left out."""
    out = {}
    for group, losses in record.sensitivities.items():
        timed = {float(r): t for r, t in record.latency.get(group, {}).items()}
        kept = [(r, loss, 1.0 - timed[r]) for r, loss in loss_curve(losses)[1:] if r in timed]
        saved = [max(0.0, s) for s in isotonic([s for _, _, s in kept])]
        out[group] = [(0.0, 0.0, 0.0)] + [(r, loss, s) for (r, loss, _), s in zip(kept, saved)
                                          if max_loss is None or loss <= max_loss]
    return out


class Overlap:
    """How much of a group's saving is left once other groups are pruned.

    A layer's cost is the product of its input and output widths, so two groups that cut the same
    layer save less together than the sum of their savings, each timed alone. Each group's
    saving is spread over the layers it cuts by their MACs; :meth:`share` is the part of those
    MACs that the other groups' ratios leave (1 when no other group cuts them).
    ``layers``: per group, ``[(layer, MACs)]`` (:class:`~autoprune.engine.allocate.FlopsModel`'s
    ``affected``); ``channels``: per group, its channel count.
    """

    def __init__(self, layers: Mapping[str, list[tuple[Any, float]]],
                 channels: Mapping[str, int], round_to: int | None = None):
        self.layers = {g: [(m, float(macs)) for m, macs in ls if macs > 0]
                       for g, ls in layers.items()}
        self.channels, self.round_to = channels, round_to
        self.cutters: dict[Any, list[str]] = {}  # layer -> the groups that cut it
        for g, ls in self.layers.items():
            for m, _ in ls:
                self.cutters.setdefault(m, []).append(g)

    @classmethod
    def of(cls, flops: FlopsModel) -> "Overlap":
        """The overlap of the groups of a FLOPs model."""
        return cls(flops.affected, flops.channels, flops.round_to)

    def share(self, group: str, ratios: Mapping[str, float]) -> float:
        """The part of ``group``'s layers' MACs that the other groups' ``ratios`` leave."""
        total = left = 0.0
        for m, macs in self.layers.get(group, ()):
            kept = 1.0
            for other in self.cutters[m]:
                r = ratios.get(other, 0.0)
                if other != group and r > 0:
                    c = self.channels[other]
                    kept *= channels_to_keep(c, r, self.round_to) / c
            total, left = total + macs, left + macs * kept
        return left / total if total > 0 else 1.0


def greedy_path(table: Mapping[str, list[tuple[float, float, float]]],
                overlap: Overlap | None = None) -> list[Step]:
    """The order in which the greedy allocation raises groups' ratios: each step is the move of
    one group from its current point to a larger one with the least loss added per latency saved
    (ties: the larger saving); moves that save nothing are never taken. With ``overlap``, a
    move's saving (as timed alone) is scaled by the share of the group's layers that the steps
    taken so far left (:meth:`Overlap.share`), and so is the saving the step records: a group
    next to one already pruned saves less."""
    at = {g: 0 for g in table}
    ratios: dict[str, float] = {}
    path: list[Step] = []
    while True:
        best = None
        for g, points in table.items():
            _, l0, s0 = points[at[g]]
            share = 1.0 if overlap is None else overlap.share(g, ratios)
            for j in range(at[g] + 1, len(points)):
                _, l1, s1 = points[j]
                saved = (s1 - s0) * share
                if saved > 1e-9:
                    key = ((l1 - l0) / saved, -saved, g)
                    if best is None or key < best[0]:
                        best = (key, g, j, saved)
        if best is None:
            return path
        _, g, j, saved = best
        r0, l0, s0 = table[g][at[g]]
        r1, l1, s1 = table[g][j]
        path.append((g, r1, l1 - l0, saved))
        at[g], ratios[g] = j, r1


def allocation(path: list[Step], goal: float) -> tuple[dict[str, float], float, float]:
    """The steps of ``path`` taken until the summed table saving reaches ``goal``, the last one
    partly (ratio, loss and saving interpolated along it; steps start where the group's previous
    step ended, or at 0): ``(ratios, summed table saving, summed loss)``."""
    ratios: dict[str, float] = {}
    saved = loss = 0.0
    for g, r, dl, ds in path:
        if saved >= goal - 1e-12:
            break
        t = min(1.0, (goal - saved) / ds)
        start = ratios.get(g, 0.0)
        ratios[g], saved, loss = start + t * (r - start), saved + t * ds, loss + t * dl
    return ratios, saved, loss


def threshold_allocation(table: Table, goal: float) -> tuple[dict[str, float], float, float]:
    """The loss-threshold allocation (PaddleSlim's, the one :func:`ratios_by_flops` bisects)
    whose summed table saving is ``goal``: every group pruned as far as its loss stays within
    one threshold, the threshold bisected; ``(ratios, summed table saving, summed loss)``. It
    spreads the loss evenly where the greedy one follows the savings timed alone, and wins where
    those do not add up."""
    anchored = {g: threshold_curve({r: loss for r, loss, _ in points[1:]})
                for g, points in table.items()}

    def at(threshold: float) -> tuple[dict[str, float], float, float]:
        ratios = {g: ratio_for_loss(curve, threshold) for g, curve in anchored.items()}
        figures = [read_curve(table[g], r) for g, r in ratios.items()]
        return ({g: r for g, r in ratios.items() if r > 0}, sum(s for _, s in figures),
                sum(loss for loss, _ in figures))

    lo, hi = 0.0, max((v for curve in anchored.values() for v in curve.values()), default=0.0)
    best = at(hi)
    if best[1] <= goal:
        return best
    for _ in range(60):
        mid = (lo + hi) / 2
        found = at(mid)
        if found[1] < goal:
            lo = mid
        else:
            hi, best = mid, found
    return best
