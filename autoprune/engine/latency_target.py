"""Ratios for a latency target: the least summed sensitivity loss for a measured speed-up.

Each group's points (ratio, loss, latency saved) come from a table timed with
``sensitivity(..., latency=True)``. A greedy allocation takes, again and again, the step of any
group with the least loss per millisecond saved (looking ahead over all of a group's larger
measured ratios, so a flat stretch of a loss curve is seen as one cheap step). Each group's
savings are first made non-decreasing in the ratio (isotonic regression: a noisy point that
measured more saving than a larger ratio is averaged with it, not believed). The groups' savings
do not add up (a conv's cost is the product of its input and output widths, so two groups pruned
together save less than the sum): the greedy allocation discounts a group's saving by the share
of its layers' MACs that the groups it pruned before left (:class:`Overlap`), so it prefers
groups whose savings still count, and the discounted sum is only a goal: a pruned
copy is timed against the unpruned model (in pairs, see :mod:`autoprune.engine.latency`) and the
goal is corrected, by interpolating between the allocations measured on either side of the target,
until the measured reduction lands within half the tolerance, as the median of three timed copies
of the same model (or, after ``max_tries`` timings, the closest within the tolerance is taken).
The one-loss-threshold allocation (PaddleSlim's, :func:`threshold_allocation`) is brought to the
target the same way, and of the two the one with the least summed table loss there is returned:
where the savings timed alone stop adding up (YOLOv8n at -50 %: 86 % of the FLOPs gone), even
losses reach the measured latency more cheaply than the greedy path.
"""
from __future__ import annotations

import copy
import logging
import math
import os
import statistics
from typing import Any, Callable, Iterable, Mapping

import torch.nn as nn

from ..errors import ConfigError
from .allocate import FlopsModel, ignored_names, loss_curve, ratio_for_loss, threshold_curve
from .groups import PruningGraph, channels_to_keep, check_criterion
from .latency import PairedTimer, check_latency_table, describe, latency_setting
from .prune import check_round_to, prune
from .store import SensitivityRecord, check_fingerprint, read_record

log = logging.getLogger("autoprune")
Step = tuple[str, float, float, float]  # group, ratio, loss added, share of latency saved


class LatencyRatios(dict):
    """Ratios found for a latency target: ``.target``, ``.achieved`` (the measured reduction),
    ``.baseline_ms`` and ``.pruned_ms`` (measured, paired), ``.setting`` (where it was timed),
    ``.loss`` (the summed table loss of the ratios), ``.table_saving`` (the sum of the groups'
    savings in the table: the allocation's goal, not a prediction; it can exceed 1),
    ``.method`` (the allocation family taken: ``"greedy"`` or ``"threshold"``) and
    ``.candidates`` (per family tried: the measured reduction it landed on and its loss)."""

    target: float
    table_saving: float
    achieved: float
    baseline_ms: float
    pruned_ms: float
    setting: dict[str, Any]
    loss: float
    method: str
    candidates: dict[str, dict[str, float]]


def isotonic(values: list[float]) -> list[float]:
    """The non-decreasing sequence closest to ``values`` in least squares (pool adjacent
    violators: a run that decreases is replaced by its mean)."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([float(v), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, n1), (m2, n2) = blocks.pop(-2), blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return [m for m, n in blocks for _ in range(int(n))]


def curves(record: SensitivityRecord, max_loss: float | None = None
           ) -> dict[str, list[tuple[float, float, float]]]:
    """Per group, ``[(ratio, loss, saved)]`` from (0, 0, 0) over the points that have both a loss
    and a latency; ``saved`` = 1 - pruned / unpruned latency. Losses are made non-decreasing
    (pruning more never counts as less harmful), savings too (isotonic regression over the
    group's timed points, at least 0: timing noise is averaged out, not believed); points over
    ``max_loss`` are left out."""
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


Table = Mapping[str, list[tuple[float, float, float]]]  # what :func:`curves` returns


def _point_at(points: list[tuple[float, float, float]], ratio: float) -> tuple[float, float]:
    """(loss, saved) of one group's curve at ``ratio``: linear between points, flat past the
    last."""
    for (r0, l0, s0), (r1, l1, s1) in zip(points, points[1:]):
        if ratio <= r1:
            t = (ratio - r0) / (r1 - r0) if r1 > r0 else 1.0
            return l0 + t * (l1 - l0), s0 + t * (s1 - s0)
    return points[-1][1], points[-1][2]


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
        figures = [_point_at(table[g], r) for g, r in ratios.items()]
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


def measure_reduction(model: nn.Module, example_inputs: Any, ratios: Mapping[str, float],
                      timer: PairedTimer, *, criterion: str = "l1_norm",
                      round_to: int | None = None, ignored_layers: Iterable[Any] = ()) -> float:
    """The measured latency reduction of ``model`` pruned by ``ratios`` (a pruned copy, timed
    against the unpruned model by ``timer``)."""
    if not ratios:
        return 0.0
    pruned = prune(copy.deepcopy(model), example_inputs, ratios, criterion=criterion,
                   round_to=round_to, ignored_layers=ignored_names(model, ignored_layers)).model
    return 1.0 - timer.compare(pruned)


def _record(sens_or_record: Any) -> tuple[SensitivityRecord, Any]:
    if isinstance(sens_or_record, SensitivityRecord):
        return sens_or_record, "the sensitivity table"
    if isinstance(getattr(sens_or_record, "record", None), SensitivityRecord):
        return sens_or_record.record, "the sensitivity table"
    if isinstance(sens_or_record, (str, os.PathLike)):
        return read_record(sens_or_record), sens_or_record
    raise ConfigError(f"ratios_by_latency needs a sensitivity file timed with latency=True (a "
                      f"path, a SensitivityRecord or what sensitivity() returned), not "
                      f"{type(sens_or_record).__name__}")


MAX_TIMES = 4  # timings of one pruned model, at most
# timings of the model that is taken: each times a new pruned copy, and copies differ (the same
# mobilenetv3 allocation at 224 px: -33 to -36 %, then -37 to -41 % in the same process, and
# -29 to -33 % for a rebuilt copy), with an occasional copy off by 15 points; the median of
# three is not moved by one such copy
CONFIRMATIONS = 3


class Timings:
    """The measured reductions of the pruned models tried, by model: goals whose allocations
    keep the same channel counts (``shape_of(ratios)``) are the same model, and share its
    timings. A model's reduction is the median of its timings (one that a busy moment put out
    of line does not decide once the model has three)."""

    def __init__(self, shape_of: Callable[[Mapping[str, float]], Any]):
        self.shape_of = shape_of
        self.shape: dict[float, Any] = {}  # goal -> model
        self.timings: dict[Any, list[float]] = {}  # model -> measured reductions
        self.count, self.last = 0, math.nan

    def add(self, goal: float, ratios: Mapping[str, float], reduction: float) -> float:
        """Record one timing of ``goal``'s model; its reduction so far."""
        shape = self.shape[goal] = self.shape_of(ratios)
        self.timings.setdefault(shape, []).append(reduction)
        self.count, self.last = self.count + 1, reduction
        return self.reduction(goal)

    def reduction(self, goal: float) -> float:
        """The median timing of ``goal``'s model."""
        return statistics.median(self.timings[self.shape[goal]])

    def times(self, goal: float) -> int:
        """How often ``goal``'s model was timed (0 if never)."""
        return len(self.timings.get(self.shape.get(goal), ()))

    @property
    def models(self) -> int:
        """How many different models were timed."""
        return len(self.timings)

    def by_goal(self) -> dict[float, float]:
        """Every goal tried, with its model's reduction."""
        return {g: self.reduction(g) for g in self.shape}


def next_goal(tried: Mapping[float, float], target: float, most: float) -> float | None:
    """The next goal (summed table saving) to time, from the goals timed so far and their measured
    reductions: those are first made non-decreasing in the goal (isotonic regression: one timing
    that a busy moment put out of line is averaged with its neighbours, not followed), then
    interpolated between the nearest goals short of and past the target, else scaled from the
    nearest one (never over ``most``); None when it would repeat one."""
    goals = sorted(tried)
    fitted = dict(zip(goals, isotonic([tried[g] for g in goals])))
    short = [g for g in goals if fitted[g] < target]
    past = [g for g in goals if fitted[g] >= target]
    if short and past:
        lo, hi = short[-1], past[0]
        goal = lo + (target - fitted[lo]) * (hi - lo) / (fitted[hi] - fitted[lo])
    else:
        near = short[-1] if short else past[0]
        achieved = fitted[near]
        goal = near * target / achieved if achieved > 0 else 2 * near + 0.01
        goal = min(goal, most)
    if any(abs(goal - g) < 1e-4 for g in tried):
        return None
    return goal


def check_latency_target(pruned_latency: Any) -> float:
    """Refuse a latency target outside (0, 1) (one-line ConfigError)."""
    if isinstance(pruned_latency, bool) or not isinstance(pruned_latency, (int, float)) \
            or not 0.0 < pruned_latency < 1.0:
        raise ConfigError(f"pruned_latency={pruned_latency!r} is outside (0, 1): pass the "
                          f"fraction of latency to remove, e.g. 0.4 for 40 % faster")
    return float(pruned_latency)


Allocate = Callable[[float], tuple[dict[str, float], float, float]]  # goal -> allocation


class Landing:
    """One allocation family brought to a measured latency target: the goals (summed table
    savings) tried, their models' measured reductions, and the goal taken."""

    def __init__(self, name: str, allocate: Allocate, timings: Timings):
        self.name, self.allocate, self.timings = name, allocate, timings
        self.goal, self.achieved = math.nan, math.nan

    def take(self, target: float, tolerance: float) -> None:
        """Take the goal closest to ``target`` (close and confirmed first)."""
        tried = self.timings.by_goal()

        def rank(g: float) -> tuple:
            close = abs(tried[g] - target) <= tolerance / 2
            return (not close, -self.timings.times(g) if close else 0, abs(tried[g] - target))

        self.goal = min(tried, key=rank)
        self.achieved = tried[self.goal]

    @property
    def loss(self) -> float:
        """The summed table loss of the goal taken."""
        return self.allocate(self.goal)[2]


def land(landing: Landing, target: float, measure: Callable[[dict], float], *,
         tolerance: float, max_tries: int, wanted: Mapping[str, Any]) -> Landing:
    """Time ``landing``'s allocations, correcting the goal until the measured reduction (the
    median over three pruned copies) is within half the ``tolerance`` of ``target`` or
    ``max_tries`` timings are spent, then take the closest; ConfigError when even the largest
    goal is too slow."""
    timed, most = landing.timings, landing.allocate(math.inf)[1]
    goal = min(target, most)
    while goal is not None and timed.count < max_tries:
        ratios = landing.allocate(goal)[0]
        achieved = timed.add(goal, ratios, measure(ratios))
        log.debug("ratios_by_latency (%s): goal %.4f (table saving) measured %.4f, %.4f over %d",
                  landing.name, goal, timed.last, achieved, timed.times(goal))
        if abs(achieved - target) <= tolerance / 2:
            if timed.times(goal) >= CONFIRMATIONS:
                break
            continue  # a close one is timed (a new copy) again before it is taken
        if achieved < target and goal >= most:  # every point of the table taken, still too slow
            raise ConfigError(
                f"pruned_latency={target} is not reachable with this table: the most it "
                f"allows is {achieved:.3f} (measured on {describe(wanted)}, each group "
                f"pruned as far as its timed points save latency); lower the target or "
                f"measure larger ratios")
        goal = next_goal(timed.by_goal(), target, most)
        if goal is None or timed.times(goal) >= MAX_TIMES:
            break
    landing.take(target, tolerance)
    return landing


CANDIDATES = ("greedy", "threshold")


def ratios_by_latency(model: nn.Module, example_inputs: Any, sens_or_record: Any,
                      pruned_latency: float, *, device: str = "cpu", threads: int | None = None,
                      batch: int = 1, round_to: int | None = None,
                      ignored_layers: Iterable[Any] = (), criterion: str | None = None,
                      max_loss: float | None = None, tolerance: float = 0.03,
                      max_tries: int = 12, rounds: int = 25, overlap: bool = True,
                      candidates: Iterable[str] = CANDIDATES) -> LatencyRatios:
    """Ratios that remove ``pruned_latency`` (a fraction, e.g. 0.4) of ``model``'s measured
    latency on ``device`` (``threads``, ``batch`` copies of the first example) with the least
    summed sensitivity loss.

    ``sens_or_record``: a sensitivity file (path or record, or what ``sensitivity(...,
    latency=True)`` returned) timed in this very setting (else a SensitivityFileError).
    ``candidates``: the allocation families tried, each brought to the target by measurement:
    ``"greedy"`` on loss per millisecond saved over the measured ratios (with ``overlap``, a
    group's saving is discounted by the share of its layers' MACs that groups pruned earlier
    already removed, see :class:`Overlap`) and ``"threshold"`` (one loss threshold for every
    group, :func:`threshold_allocation`); ``max_loss`` leaves out points losing more. For each,
    pruned copies are timed (``rounds`` paired rounds each) and the goal corrected until the
    measured reduction (the median over three pruned copies) is within half the ``tolerance``
    of the target (else, after ``max_tries`` timings, the closest); of those within
    ``tolerance``, the one with the least summed table loss is returned. A ConfigError says why
    when none is (the most the table allows, or timings too unsteady). ``criterion`` defaults
    to the table's.
    """
    target = check_latency_target(pruned_latency)
    check_round_to(round_to)
    candidates = tuple(candidates)
    if not candidates or set(candidates) - set(CANDIDATES):
        raise ConfigError(f"candidates={candidates!r}: pick from {CANDIDATES}")
    record, where = _record(sens_or_record)
    criterion = check_criterion(criterion or record.criterion)
    wanted = latency_setting(example_inputs, device=device, threads=threads, batch=batch)
    check_latency_table(record, wanted, where)
    graph = PruningGraph(model, example_inputs, ignored_layers)
    check_fingerprint(record, where, graph.fingerprint)
    graph.check_names(record.sensitivities)
    table = curves(record, max_loss)
    # many more rounds than a table point gets: these few timings decide the answer (on the
    # 2-core VM one pruned mobilenetv3 at 224 px measured a spread (sd) of 2.9 points over
    # 9 rounds, 1.1 over 25)
    timer = PairedTimer(model, example_inputs, device=device, threads=threads, batch=batch,
                        rounds=rounds)
    measure = lambda ratios: measure_reduction(model, example_inputs, ratios, timer,
                                               criterion=criterion, round_to=round_to,
                                               ignored_layers=ignored_layers)
    shape_of = lambda ratios: tuple(sorted(
        (g, channels_to_keep(graph.group(g).channels, r, round_to)) for g, r in ratios.items()))
    families: dict[str, Allocate] = {}
    if "greedy" in candidates:
        path = greedy_path(table, Overlap.of(FlopsModel(graph, example_inputs, round_to))
                           if overlap else None)
        families["greedy"] = lambda goal: allocation(path, goal)
    if "threshold" in candidates:
        families["threshold"] = lambda goal: threshold_allocation(table, goal)
    landed = [land(Landing(name, allocate, Timings(shape_of)), target, measure,
                   tolerance=tolerance, max_tries=max_tries, wanted=wanted)
              for name, allocate in families.items()]
    close = [one for one in landed if abs(one.achieved - target) <= tolerance]
    if not close:
        nearest = min(landed, key=lambda one: abs(one.achieved - target))
        models = sum(one.timings.models for one in landed)
        raise ConfigError(f"pruned_latency={target} was missed by more than {tolerance:.2f}: the "
                          f"closest of {models} timed models removed {nearest.achieved:.3f} "
                          f"on {describe(wanted)}; the timings vary too much here (a busy "
                          f"machine?) or the table's steps are coarse: retry, or pass "
                          f"tolerance="
                          f"{max(0.05, round(abs(nearest.achieved - target) + 0.01, 2))}")
    best = min(close, key=lambda one: one.loss)
    ratios, table_saving, loss = best.allocate(best.goal)
    result = LatencyRatios(ratios)
    result.target, result.table_saving, result.achieved = target, table_saving, best.achieved
    result.loss, result.method = loss, best.name
    result.candidates = {one.name: {"achieved": one.achieved, "loss": one.loss}
                         for one in landed}
    result.baseline_ms = timer.baseline_ms
    result.pruned_ms = timer.baseline_ms * (1.0 - best.achieved)
    result.setting = {**timer.setting, "baseline_ms": result.baseline_ms}
    log.info("ratios_by_latency: target %.3f, achieved %.3f (%.2f -> %.2f ms) by the %s "
             "allocation, %d timed", target, best.achieved, result.baseline_ms,
             result.pruned_ms, best.name, sum(one.timings.count for one in landed))
    return result
