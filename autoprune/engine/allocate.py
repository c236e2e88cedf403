"""Turning a sensitivity table into per-group pruning ratios: by tolerated loss or by
FLOPs target."""
from __future__ import annotations

import logging
import math
from typing import Any, Iterable, Mapping, Sequence

import torch.nn as nn

from ..errors import ConfigError
from .channels import channels_to_keep
from .groups import PruningGraph
from .measure import count_flops
from .fast_copy import fast_deepcopy
from .prune import prune

log = logging.getLogger("autoprune")
Table = Mapping[str, Mapping[float, float]]


def _check_table(sens: Table) -> None:
    if not sens:
        raise ConfigError("the sensitivity table is empty: run autoprune.sensitivity(...) first")
    for name, points in sens.items():
        for r, loss in points.items():
            if not 0.0 < float(r) < 1.0 or not math.isfinite(float(loss)):
                raise ConfigError(f"group {name!r} has an invalid point {r}: {loss} "
                                  f"(ratios lie in (0, 1), losses are finite numbers)")


def ratios_by_loss(sens: Table, loss: float) -> dict[str, float]:
    """Per-group ratio that keeps each group's measured loss within ``loss`` (PaddleSlim semantics).

    For each group, scan from the highest ratio down and take the first point whose loss is
    ``<= loss``; interpolate linearly toward the next higher point. All points within: the
    largest ratio. Even the smallest ratio over the threshold: 0.0.
    """
    if not isinstance(loss, (int, float)) or not math.isfinite(loss):
        raise ConfigError(f"loss threshold {loss!r} is not a finite number: pass e.g. 0.05")
    _check_table(sens)
    return {name: ratio_for_loss(points, loss) for name, points in sens.items()}


def ratio_for_loss(points: Mapping[float, float], loss: float) -> float:
    """A group's ratio for the loss threshold ``loss`` (see :func:`ratios_by_loss`)."""
    pts = sorted((float(r), float(v)) for r, v in points.items())
    for i in range(len(pts) - 1, -1, -1):
        r0, l0 = pts[i]
        if l0 <= loss:
            if i == len(pts) - 1:
                return r0
            r1, l1 = pts[i + 1]
            return r0 + (loss - l0) * (r1 - r0) / (l1 - l0)
    return 0.0


class FlopsRatios(dict):
    """Ratios found for a FLOPs target; ``.target``, ``.achieved`` (measured) and ``.threshold``."""

    target: float
    achieved: float
    threshold: float


class FlopsModel:
    """Predicts a model's MACs for any per-group ratios without pruning it.

    Each layer's MACs (measured once) are scaled by the kept fraction of every group that cuts its
    input or output channels.
    """

    def __init__(self, graph: PruningGraph, example_inputs: Any, round_to: int | None = None):
        self.round_to = round_to
        self.total, layer = count_flops(graph.model, example_inputs, layer_wise=True)
        self.layers = layer  # {leaf module: MACs}
        self.channels = {g.name: g.channels for g in graph.groups}
        self.affected: dict[str, list[tuple[nn.Module, int]]] = {}
        for g in graph.groups:
            modules = {id(dep.target.module): dep.target.module for dep, _ in graph.tp_group(g)}
            self.affected[g.name] = [(m, layer.get(m, 0)) for m in modules.values()
                                     if layer.get(m, 0)]

    def predict(self, ratios: Mapping[str, float]) -> float:
        """Predicted MACs after pruning ``ratios``."""
        factor: dict[nn.Module, float] = {}
        cost: dict[nn.Module, int] = {}
        for name, ratio in ratios.items():
            if ratio <= 0:
                continue
            c = self.channels[name]
            keep = channels_to_keep(c, ratio, self.round_to) / c
            for m, macs in self.affected[name]:
                factor[m] = factor.get(m, 1.0) * keep
                cost[m] = macs
        return self.total - sum(cost[m] * (1.0 - f) for m, f in factor.items())


def isotonic(values: Sequence[float]) -> list[float]:
    """The non-decreasing sequence closest to ``values`` in least squares (pool adjacent
    violators: a run that decreases is replaced by its mean)."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([float(v), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, n1), (m2, n2) = blocks.pop(-2), blocks.pop()
            blocks.append([(m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2])
    return [m for m, n in blocks for _ in range(int(n))]


def loss_curve(points: Mapping[float, float]) -> list[tuple[float, float]]:
    """A group's measured losses as the FLOPs and latency allocations read them:
    ``[(ratio, loss)]`` sorted, from (0, 0) (pruning nothing loses nothing), fitted
    non-decreasing and at least 0 (:func:`isotonic`, then clipped: the closest such curve in
    least squares). Pruning more never counts as less harmful, and a point that measured more
    loss than a larger ratio is averaged with it, not believed: near zero loss the points of a
    flat curve differ by a few images' flips, and carrying the largest of them forward (a
    running maximum) let one noisy point set the group's ratio. Measured on the kept tables of
    resnet18 and mobilenetv3 (benchmarks/README, "Isotonic curves"), the FLOPs allocations of a
    full and an adaptive table, and of the two halves of the images, agree more closely, and an
    allocation made on one half loses as little or less on the other."""
    measured = sorted((float(r), float(v)) for r, v in points.items())
    fitted = isotonic([v for _, v in measured])
    return [(0.0, 0.0)] + [(r, max(0.0, f)) for (r, _), f in zip(measured, fitted)]


def read_curve(points: Sequence[tuple[float, ...]], ratio: float) -> tuple[float, ...]:
    """The values of a curve ``[(ratio, value, ...)]`` (sorted, from ratio 0) at ``ratio``:
    linear between points, flat past the last."""
    for p0, p1 in zip(points, points[1:]):
        if ratio <= p1[0]:
            t = (ratio - p0[0]) / (p1[0] - p0[0]) if p1[0] > p0[0] else 1.0
            return tuple(v0 + t * (v1 - v0) for v0, v1 in zip(p0[1:], p1[1:]))
    return tuple(points[-1][1:])


def summed_loss(sens: Table, ratios: Mapping[str, float]) -> float:
    """The summed table loss of ``ratios``: per group, its :func:`loss_curve` read at its ratio
    (:func:`read_curve`); groups left out (or at 0) add nothing."""
    return sum(read_curve(loss_curve(sens[group]), ratio)[0]
               for group, ratio in ratios.items() if ratio > 0)


def threshold_curve(points: Mapping[float, float], tilt: float = 1e-6) -> dict[float, float]:
    """A group's loss curve made continuous and increasing, for a threshold allocation: the
    :func:`loss_curve`, plus a tiny tilt that breaks ties between equal losses. For an increasing
    measured curve this changes nothing but the start point, and a group's ratio then grows
    continuously with the threshold instead of jumping."""
    return {r: v + tilt * r for r, v in loss_curve(points)}


def ratios_by_flops(model: nn.Module, example_inputs: Any, sens: Table, pruned_flops: float, *,
                    round_to: int | None = None, ignored_layers: Iterable[Any] = (),
                    max_ratio: float = 0.9) -> FlopsRatios:
    """Ratios that remove ``pruned_flops`` (a fraction in (0, 1)) of the model's FLOPs.

    Bisection on the loss threshold of :func:`ratios_by_loss` (PaddleSlim ``sensitive_prune``):
    the least sensitive groups are pruned first. Each group's curve starts at (ratio 0, loss 0) and
    is made non-decreasing (see :func:`threshold_curve`), so every FLOPs figure between 0 and the
    most the table allows is reachable. The FLOPs reduction is then measured on a pruned
    copy and returned as ``.achieved`` (within one percentage point of the target whenever the
    profile allows it). Raises ConfigError if the target cannot be reached.
    """
    if not isinstance(pruned_flops, (int, float)) or not 0.0 < pruned_flops < 1.0:
        raise ConfigError(f"pruned_flops={pruned_flops!r} is outside (0, 1): pass the fraction of "
                          f"FLOPs to remove, e.g. 0.4")
    _check_table(sens)
    graph = PruningGraph(model, example_inputs, ignored_layers)
    graph.check_names(sens)
    flops = FlopsModel(graph, example_inputs, round_to)

    anchored = {name: threshold_curve(points) for name, points in sens.items()}

    def reduction(threshold: float) -> tuple[float, dict[str, float]]:
        ratios = {k: min(ratio_for_loss(p, threshold), max_ratio) for k, p in anchored.items()}
        return 1.0 - flops.predict(ratios) / flops.total, ratios

    losses = [v for points in anchored.values() for v in points.values()]  # tilt included
    most, top = reduction(max(losses))
    best = None
    if most < pruned_flops - 0.01:  # the prediction can underestimate: measure before refusing
        top = {k: v for k, v in top.items() if v > 0}
        most = _measured_reduction(model, example_inputs, top, round_to, ignored_layers,
                                   flops.total)
        if most < pruned_flops - 0.01:
            raise ConfigError(f"pruned_flops={pruned_flops} is not reachable with this profile: "
                              f"the most it allows is {most:.3f} (measured, every group at its "
                              f"largest measured ratio); lower the target or measure larger ratios")
        best = (most, max(losses), top)

    def bisect(goal: float) -> tuple[float, dict[str, float]]:
        lo, hi = min(losses) - 1.0, max(losses)
        best = (math.inf, hi, {})
        for _ in range(60):
            mid = (lo + hi) / 2
            red, ratios = reduction(mid)
            best = min(best, (abs(red - goal), mid, ratios), key=lambda b: b[0])
            lo, hi = (mid, hi) if red < goal else (lo, mid)
        return best[1], best[2]

    # The layer-cost model is close but not exact (activations, rounding): correct it against a
    # real prune of a copy a few times, aiming the prediction by the measured error.
    goal = pruned_flops
    for _ in range(4):
        threshold, ratios = bisect(goal)
        ratios = {k: v for k, v in ratios.items() if v > 0}
        achieved = _measured_reduction(model, example_inputs, ratios, round_to, ignored_layers,
                                       flops.total)
        if best is None or abs(achieved - pruned_flops) < abs(best[0] - pruned_flops):
            best = (achieved, threshold, ratios)
        if abs(achieved - pruned_flops) <= 0.002:
            break
        goal = min(max(goal + pruned_flops - achieved, 0.0), 0.999)
    achieved, threshold, ratios = best
    result = FlopsRatios(ratios)
    result.target, result.achieved, result.threshold = pruned_flops, achieved, threshold
    log.info("ratios_by_flops: target %.3f, achieved %.3f (loss threshold %.4f)",
             pruned_flops, achieved, threshold)
    return result


def _measured_reduction(model, example_inputs, ratios, round_to, ignored_layers,
                        flops_before: int) -> float:
    result = prune(fast_deepcopy(model), example_inputs, ratios, round_to=round_to,
                   ignored_layers=ignored_names(model, ignored_layers), flops_before=flops_before)
    return result.flops_reduction


def ignored_names(model: nn.Module, ignored_layers: Iterable[Any]) -> list[str]:
    """Ignored layers as names, so they can be applied to a copy of the model."""
    names = {m: n for n, m in model.named_modules()}
    return [item if isinstance(item, str) else names[item] for item in ignored_layers or ()]
