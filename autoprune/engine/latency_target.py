"""Ratios for a latency target: the least summed sensitivity loss for a measured speed-up.

Each group's points (ratio, loss, latency saved) come from a table timed with
``sensitivity(..., latency=True)``. A greedy allocation takes, again and again, the step of any
group with the least loss per millisecond saved (looking ahead over all of a group's larger
measured ratios, so a flat stretch of a loss curve is seen as one cheap step); its savings are
added up as the prediction. A pruned copy is then timed against the unpruned model (in pairs, see
:mod:`autoprune.engine.latency`), and the goal handed to the allocation is scaled up or down until
the measured reduction lands within ``tolerance`` of the target.
"""
from __future__ import annotations

import copy
import logging
import math
import os
from typing import Any, Iterable, Mapping

import torch.nn as nn

from ..errors import ConfigError
from .allocate import ignored_names
from .groups import PruningGraph, check_criterion
from .latency import PairedTimer, check_latency_table, describe, latency_setting
from .prune import check_round_to, prune
from .store import SensitivityRecord, check_fingerprint, read_record

log = logging.getLogger("autoprune")
Step = tuple[str, float, float, float]  # group, ratio, loss added, share of latency saved


class LatencyRatios(dict):
    """Ratios found for a latency target: ``.target``, ``.predicted`` (from the table),
    ``.achieved`` (measured reduction), ``.baseline_ms`` and ``.pruned_ms`` (measured, paired),
    ``.setting`` (where it was timed) and ``.loss`` (the summed table loss of the ratios)."""

    target: float
    predicted: float
    achieved: float
    baseline_ms: float
    pruned_ms: float
    setting: dict[str, Any]
    loss: float


def curves(record: SensitivityRecord, max_loss: float | None = None
           ) -> dict[str, list[tuple[float, float, float]]]:
    """Per group, ``[(ratio, loss, saved)]`` from (0, 0, 0) over the points that have both a loss
    and a latency; ``saved`` = 1 - pruned / unpruned latency. Losses are made non-decreasing
    (pruning more never counts as less harmful); points over ``max_loss`` are left out."""
    out = {}
    for group, losses in record.sensitivities.items():
        timed = record.latency.get(group, {})
        points, worst = [(0.0, 0.0, 0.0)], 0.0
        for r in sorted(losses):
            worst = max(worst, float(losses[r]))
            if r in timed and (max_loss is None or worst <= max_loss):
                points.append((r, worst, 1.0 - timed[r]))
        out[group] = points
    return out


def greedy_path(table: Mapping[str, list[tuple[float, float, float]]]) -> list[Step]:
    """The order in which the greedy allocation raises groups' ratios: each step is the move of
    one group from its current point to a larger one with the least loss added per latency saved
    (ties: the larger saving); moves that save nothing are never taken."""
    at = {g: 0 for g in table}
    path: list[Step] = []
    while True:
        best = None
        for g, points in table.items():
            _, l0, s0 = points[at[g]]
            for j in range(at[g] + 1, len(points)):
                _, l1, s1 = points[j]
                if s1 - s0 > 1e-9:
                    key = ((l1 - l0) / (s1 - s0), -(s1 - s0), g)
                    if best is None or key < best[0]:
                        best = (key, g, j)
        if best is None:
            return path
        _, g, j = best
        r0, l0, s0 = table[g][at[g]]
        r1, l1, s1 = table[g][j]
        path.append((g, r1, l1 - l0, s1 - s0))
        at[g] = j


def allocation(path: list[Step], goal: float,
               table: Mapping[str, list[tuple[float, float, float]]] | None = None
               ) -> tuple[dict[str, float], float, float]:
    """The steps of ``path`` taken until the predicted saving reaches ``goal``, the last one
    partly (ratio, loss and saving interpolated along it; steps start where the group's previous
    step ended, or at 0): ``(ratios, predicted saving, summed loss)``."""
    ratios: dict[str, float] = {}
    saved = loss = 0.0
    for g, r, dl, ds in path:
        if saved >= goal - 1e-12:
            break
        t = min(1.0, (goal - saved) / ds)
        start = ratios.get(g, 0.0)
        ratios[g], saved, loss = start + t * (r - start), saved + t * ds, loss + t * dl
    return ratios, saved, loss


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


def check_latency_target(pruned_latency: Any) -> float:
    """Refuse a latency target outside (0, 1) (one-line ConfigError)."""
    if isinstance(pruned_latency, bool) or not isinstance(pruned_latency, (int, float)) \
            or not 0.0 < pruned_latency < 1.0:
        raise ConfigError(f"pruned_latency={pruned_latency!r} is outside (0, 1): pass the "
                          f"fraction of latency to remove, e.g. 0.4 for 40 % faster")
    return float(pruned_latency)


def ratios_by_latency(model: nn.Module, example_inputs: Any, sens_or_record: Any,
                      pruned_latency: float, *, device: str = "cpu", threads: int | None = None,
                      batch: int = 1, round_to: int | None = None,
                      ignored_layers: Iterable[Any] = (), criterion: str | None = None,
                      max_loss: float | None = None, tolerance: float = 0.03,
                      max_tries: int = 8) -> LatencyRatios:
    """Ratios that remove ``pruned_latency`` (a fraction, e.g. 0.4) of ``model``'s measured
    latency on ``device`` (``threads``, ``batch`` copies of the first example) with the least
    summed sensitivity loss.

    ``sens_or_record``: a sensitivity file (path or record, or what ``sensitivity(...,
    latency=True)`` returned) timed in this very setting (else a SensitivityFileError). Greedy
    allocation on loss per millisecond saved over the measured ratios (``max_loss`` leaves out
    points losing more), then a pruned copy is timed and the goal corrected until the measured
    reduction is within ``tolerance`` of the target; a ConfigError says why when it cannot be
    (the most the table allows, or timings too unsteady). ``criterion`` defaults to the table's.
    """
    target = check_latency_target(pruned_latency)
    check_round_to(round_to)
    record, where = _record(sens_or_record)
    criterion = check_criterion(criterion or record.criterion)
    wanted = latency_setting(example_inputs, device=device, threads=threads, batch=batch)
    check_latency_table(record, wanted, where)
    graph = PruningGraph(model, example_inputs, ignored_layers)
    check_fingerprint(record, where, graph.fingerprint)
    graph.check_names(record.sensitivities)
    path = greedy_path(curves(record, max_loss))
    # more rounds than a table point gets: these few timings decide the answer
    timer = PairedTimer(model, example_inputs, device=device, threads=threads, batch=batch,
                        rounds=9)
    measure = lambda ratios: measure_reduction(model, example_inputs, ratios, timer,
                                               criterion=criterion, round_to=round_to,
                                               ignored_layers=ignored_layers)
    most = allocation(path, math.inf)[1]
    tried: dict[float, float] = {}  # goal (predicted saving) -> measured reduction
    low, high = 0.0, math.inf  # goals measured too slow / too fast
    goal = min(target, most)
    while len(tried) < max_tries:
        achieved = tried[goal] = measure(allocation(path, goal)[0])
        log.debug("ratios_by_latency: goal %.4f (predicted saving) measured %.4f", goal, achieved)
        if abs(achieved - target) <= tolerance:
            break
        if achieved < target:
            if goal >= most:  # every point of the table taken, still too slow
                raise ConfigError(
                    f"pruned_latency={target} is not reachable with this table: the most it "
                    f"allows is {achieved:.3f} (measured on {describe(wanted)}, each group "
                    f"pruned as far as its timed points save latency); lower the target or "
                    f"measure larger ratios")
            low = goal
        else:
            high = goal
        scaled = min(goal * target / achieved if achieved > 0 else 2 * goal + 0.01, most)
        goal = scaled if low < scaled < high else (low + min(high, most)) / 2
        if goal in tried or min(high, most) - low < 1e-4:
            break
    goal = min(tried, key=lambda g: abs(tried[g] - target))
    achieved = tried[goal]
    ratios, predicted, loss = allocation(path, goal)
    if abs(achieved - target) > tolerance:
        raise ConfigError(f"pruned_latency={target} was missed by more than {tolerance:.2f}: the "
                          f"closest of {len(tried)} timed allocations removed {achieved:.3f} "
                          f"on {describe(wanted)}; the timings vary too much here (a busy "
                          f"machine?) or the table's steps are coarse: retry, or pass "
                          f"tolerance={max(0.05, round(abs(achieved - target) + 0.01, 2))}")
    result = LatencyRatios(ratios)
    result.target, result.predicted, result.achieved = target, predicted, achieved
    result.loss = loss
    result.baseline_ms = timer.baseline_ms
    result.pruned_ms = timer.baseline_ms * (1.0 - achieved)
    result.setting = {**timer.setting, "baseline_ms": result.baseline_ms}
    log.info("ratios_by_latency: target %.3f, predicted %.3f, achieved %.3f (%.2f -> %.2f ms)",
             target, predicted, achieved, result.baseline_ms, result.pruned_ms)
    return result
