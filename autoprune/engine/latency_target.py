"""Ratios for a latency target: the least summed sensitivity loss for a *measured* speed-up.

The allocations of :mod:`autoprune.engine.latency_alloc` (greedy on loss per latency saved, and
one loss threshold for every group) each hand their summed table saving as a goal: a pruned copy
is timed against the unpruned model (in pairs, see :mod:`autoprune.engine.latency`) and the goal
is corrected, by interpolating between the allocations measured on either side of the target,
until the measured reduction lands within half the tolerance, as the median of three timed copies
of the same model (or, after ``max_tries`` timings, the closest within the tolerance is taken).
Of the two, the one with the least summed table loss at the target is returned: where the savings
timed alone stop adding up (YOLOv8n at -50 %: 86 % of the FLOPs gone), even losses reach the
measured latency more cheaply than the greedy path.
"""
from __future__ import annotations

import functools
import logging
import math
import os
import statistics
from typing import Any, Callable, Iterable, Mapping

import torch.nn as nn

from ..errors import ConfigError
from .allocate import FlopsModel, ignored_names
from .channels import channels_to_keep, check_criterion
from .groups import PruningGraph
from .keywords import regroup
from .latency import PairedTimer, Timing, check_latency_table, describe, latency_setting
from .latency_alloc import (Overlap, allocation, curves, greedy_path, isotonic,
                            threshold_allocation)
from .fast_copy import fast_deepcopy
from .prune import check_round_to, remove_channels
from .store import SensitivityRecord, check_fingerprint, read_record

log = logging.getLogger("autoprune")


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


def measure_reduction(model: nn.Module, example_inputs: Any, ratios: Mapping[str, float],
                      timer: PairedTimer, *, criterion: str = "l1_norm",
                      round_to: int | None = None, ignored_layers: Iterable[Any] = (),
                      chosen_by: Callable[[str, float], list[int]] | None = None) -> float:
    """The measured latency reduction of ``model`` pruned by ``ratios`` (a pruned copy, timed
    against the unpruned model by ``timer``, in the timer's runtime). ``chosen_by``: see
    :func:`~autoprune.engine.prune.remove_channels`."""
    if not ratios:
        return 0.0
    pruned = fast_deepcopy(model)  # timed only: its FLOPs are not counted
    remove_channels(pruned, example_inputs, ratios, criterion=criterion, round_to=round_to,
                    ignored_layers=ignored_names(model, ignored_layers), chosen_by=chosen_by)
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
         tolerance: float, max_tries: int, wanted: Mapping[str, Any],
         max_loss: float | None = None,
         uncapped: Callable[[], float] | None = None) -> Landing:
    """Time ``landing``'s allocations, correcting the goal until the measured reduction (the
    median over three pruned copies) is within half the ``tolerance`` of ``target`` or
    ``max_tries`` timings are spent, then take the closest; ConfigError when even the largest
    goal is too slow (with ``max_loss``, it names the cap and ``uncapped()``: the reduction
    measured with every group at its largest timed ratio, the cap lifted)."""
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
            if max_loss is not None:
                without = f"{uncapped():.3f}" if uncapped is not None else "more"
                raise ConfigError(
                    f"pruned_latency={target} is not reachable with this table under "
                    f"max_loss={max_loss:g} (eval_metric_loss in a run), which caps each "
                    f"group's loss: the most it allows is {achieved:.3f} under that cap "
                    f"({without} without it; measured on {describe(wanted)}); raise the cap, "
                    f"leave it out, or lower the target")
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


# how ratios_by_latency searches (``search=``) and the defaults
SEARCH_DEFAULTS = {"tolerance": 0.03, "max_tries": 12, "rounds": 25, "overlap": True,
                   "candidates": CANDIDATES}
# its former keywords: the argument that holds each now, and its field there
RATIOS_BY_LATENCY_RENAMED = {**{k: ("timing", k) for k in ("device", "threads", "batch",
                                                            "runtime")},
                             **{k: ("search", k) for k in SEARCH_DEFAULTS}}


def search_options(search: Mapping[str, Any] | None) -> dict[str, Any]:
    """``search`` with the defaults of :data:`SEARCH_DEFAULTS` for the keys not given; an
    unknown key is a one-line ConfigError."""
    search = dict(search or {})
    unknown = sorted(set(search) - set(SEARCH_DEFAULTS))
    if unknown:
        raise ConfigError(f"unknown search option {unknown[0]!r}: use "
                          f"{', '.join(SEARCH_DEFAULTS)}")
    return {**SEARCH_DEFAULTS, **search}


def ratios_by_latency(model: nn.Module, example_inputs: Any, sens_or_record: Any,
                      pruned_latency: float, *, timing: Timing | Mapping[str, Any] | None = None,
                      round_to: int | None = None, ignored_layers: Iterable[Any] = (),
                      criterion: str | None = None, max_loss: float | None = None,
                      search: Mapping[str, Any] | None = None, **renamed: Any) -> LatencyRatios:
    """Ratios that remove ``pruned_latency`` (a fraction, e.g. 0.4) of ``model``'s latency,
    measured as ``timing`` says (a :class:`Timing` or a dict of its fields: device, CPU
    threads, batch copies of the first example, runtime; default: the CPU, torch's current
    threads, batch 1, eager), with the least summed sensitivity loss.

    ``search`` (every key optional): ``tolerance`` (0.03), ``max_tries`` (12), ``rounds`` (25),
    ``overlap`` (True), ``candidates`` (both families), explained below. The former keywords
    (``threads=``, ``tolerance=``...) still work, with a FutureWarning.

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
    to the table's. In a runtime other than torch each pruned copy is exported as ``autoprune
    export`` would; the table must have been timed in the same setting and runtime.
    """
    former = regroup("ratios_by_latency", renamed, RATIOS_BY_LATENCY_RENAMED)
    timing = Timing.of(timing, **former.get("timing", {}))
    found = search_options({**dict(search or {}), **former.get("search", {})})
    tolerance, max_tries, rounds = found["tolerance"], found["max_tries"], found["rounds"]
    overlap, candidates = found["overlap"], found["candidates"]
    target = check_latency_target(pruned_latency)
    check_round_to(round_to)
    candidates = tuple(candidates)
    if not candidates or set(candidates) - set(CANDIDATES):
        raise ConfigError(f"candidates={candidates!r}: pick from {CANDIDATES}")
    record, where = _record(sens_or_record)
    criterion = check_criterion(criterion or record.criterion)
    wanted = latency_setting(example_inputs, **timing.kwargs())
    check_latency_table(record, wanted, where)
    graph = PruningGraph(model, example_inputs, ignored_layers)
    check_fingerprint(record, where, graph.fingerprint)
    graph.check_names(record.sensitivities)
    table = curves(record, max_loss)
    # many more rounds than a table point gets: these few timings decide the answer (on the
    # 2-core VM one pruned mobilenetv3 at 224 px measured a spread (sd) of 2.9 points over
    # 9 rounds, 1.1 over 25)
    timer = PairedTimer(model, example_inputs, rounds=rounds, **timing.kwargs())
    # each candidate is a copy of ``model``: its channels chosen once per group and ratio
    choice = functools.lru_cache(maxsize=None)(lambda name, ratio: tuple(
        graph.channels_to_remove(graph.group(name), ratio, criterion, round_to)))
    measure = lambda ratios: measure_reduction(model, example_inputs, ratios, timer,
                                               criterion=criterion, round_to=round_to,
                                               ignored_layers=ignored_layers,
                                               chosen_by=lambda n, r: list(choice(n, r)))
    shape_of = lambda ratios: tuple(sorted(
        (g, channels_to_keep(graph.group(g).channels, r, round_to)) for g, r in ratios.items()))
    families: dict[str, Allocate] = {}
    if "greedy" in candidates:
        path = greedy_path(table, Overlap.of(FlopsModel(graph, example_inputs, round_to))
                           if overlap else None)
        families["greedy"] = lambda goal: allocation(path, goal)
    if "threshold" in candidates:
        families["threshold"] = lambda goal: threshold_allocation(table, goal)
    uncapped = None
    if max_loss is not None:  # what the table allows without the cap, timed only if asked
        uncapped = functools.lru_cache(maxsize=1)(
            lambda: measure(threshold_allocation(curves(record), math.inf)[0]))
    landed = [land(Landing(name, allocate, Timings(shape_of)), target, measure,
                   tolerance=tolerance, max_tries=max_tries, wanted=wanted, max_loss=max_loss,
                   uncapped=uncapped)
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
