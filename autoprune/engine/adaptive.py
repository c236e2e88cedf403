"""Adaptive sensitivity analysis: measure only the points, and only the images, that the
allocation for a given target needs.

Every allocation reads a group's loss curve only near a loss threshold, so per group the
analysis measures only the points that decide where its curve is read:

- ``{"loss": 0.05}`` (``eval_metric_loss``): :func:`~autoprune.engine.allocate.ratios_by_loss`
  takes, per group, the highest ratio whose loss is within the tolerance, scanning from the top
  down (PaddleSlim's reading: a point within it above one over it counts), and interpolates to
  the next. So the analysis measures each group from the top ratio down until a point is decided
  within the tolerance: the points above it are decided over it, most of them far over and
  after a few dozen images. A point still undecided gets more images before the next one down.
- ``{"flops": 0.5}``: :func:`~autoprune.engine.allocate.ratios_by_flops` bisects one threshold
  common to all groups and reads curves fitted non-decreasing (:func:`~.allocate.loss_curve`:
  pruning more never counts as less harmful; the analysis measures no point above a group's
  first point decided over the threshold, so its fit there is that point's, where the full
  table's may average it with a lower point above). So the analysis finds the *bracket* of
  that threshold on each group's ratio grid: the last point within it and the next grid point,
  decided over it, measured (or every point up to the top ratio within it; where the curve is
  flat, a point over it two grid points above will do: the one between is interpolated across,
  within a step of measuring it, :meth:`Planner._need`). It probes the ratio
  where the curve is expected to cross (from the top of the grid: the ratio squared down from a
  first point over it, then a chord through the points measured so far; it only orders the work); a
  point whose interval still straddles the threshold gets more images before any point below it is
  probed (probing first would walk a flat, noise-level curve down to its first ratio, point by
  point). A coarse pass probes every group once at its top ratio, decided against one loss,
  1 % (:data:`COARSE`: a group no ratio harms needs no other point; a sensitive group's top is
  decided over it after a few dozen images; one under it goes on from its images in the rounds,
  against the threshold the allocation reads). Then, round after round, the common threshold is
  estimated from the table with the allocator's own bisection (layer-wise MACs,
  :class:`~autoprune.engine.allocate.FlopsModel`; a curve not yet measured to the grid's top read
  as extended to it) and each group that needs a point at it gets *one* point, until no group needs
  one (brackets kept at the last two estimates: the band widens when the threshold moves). One
  point a round, not a whole bracket: the first estimates can be several times off at a threshold
  of a few images' loss, and resolving each bracket at one of them walked noise-level curves down
  to ratios the final threshold never reads. Each round first estimates from the table with a point
  decided early read at its interval's middle (upper ends, after a coarse pass, put the first
  estimate several times too high and the rounds then walked flat curves down), and only when that
  leaves no group needing a point from the upper ends, as the allocation reads them.
- ``{"latency": 0.4}``: as FLOPs, over the band of FLOPs targets from the latency target to
  ``target / 0.7`` (latency lags FLOPs: measured CPU efficiency 0.68-0.76), with brackets of
  adjacent grid points (the latency allocation's greedy path steps along measured points only);
  the latency allocation then lands on the target by measurement as usual.

The choice depends on the group's points and the thresholds only, so a resumed or
torchrun-sharded analysis measures exactly what an uninterrupted one does.

A point's images are evaluated (:mod:`autoprune.engine.adaptive_meter`) until its loss interval
(:mod:`autoprune.engine.bounds`) lies wholly below or above every threshold that matters, or every
image is seen. Such a point is written with its interval, images used and bound (``intervals`` in
the file); its entry in the table is the interval's *upper* end, so every allocation reads it
conservatively (at least as harmful as it can be: a ratio interpolated across it comes out no
larger than from the true value, and a point decided over a threshold stays over it). A later
analysis with another target refines a point an interval no longer decides (continuing from the
images already counted when the evaluation allows it). Every number is measured on the user's
evaluation data; no proxy replaces a loss.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from ..errors import ConfigError
from .allocate import FlopsModel, ratio_for_loss, threshold_curve
from .bounds import BOUNDS
from .store import SensitivityRecord, ratio_key

TARGETS = {"loss": "eval_metric_loss", "flops": "pruned_flops", "latency": "pruned_latency"}
# The losses the coarse pass decides each group's top ratio against. The first estimate of a
# FLOPs / latency target's threshold reads a top that loses much only as "over": the thresholds
# came out at 0-3 % on the classifiers measured, and the former ladder (2, 5, 10, 20, 50 %) spent
# 832-1,280 images of 2,000 placing a sensitive group's top (20-60 % loss) between two of its
# rungs. Replayed (benchmarks/README, "The coarse pass against one loss"): 5-24 % fewer images
# on each FLOPs and latency row of resnet18 and mobilenetv3 at 1,000 and 2,000 images.
COARSE = (0.01,)
LATENCY_EFFICIENCY = 0.7  # latency saved per FLOPs saved on CPUs (0.68-0.76 measured)
MAX_ROUNDS = 40  # a round measures one point per group that needs one
# how many grid steps apart a resolved bracket's ends may lie: a FLOPs allocation interpolates
# the ratio across the one grid point left between them (see Planner._need) ...
BRACKET_STEPS = {"flops": 2}
FLAT_RISE = 3.0  # ... when the curve rises by at most this many thresholds across them


@dataclass(frozen=True)
class Target:
    """What the allocation will be asked for: ``kind`` (loss, flops or latency) and ``value``."""

    kind: str
    value: float

    def to_json(self) -> dict[str, float]:
        return {self.kind: self.value}

    def describe(self) -> str:
        return {"loss": f"eval_metric_loss {self.value:g}", "flops": f"-{self.value:.0%} FLOPs",
                "latency": f"-{self.value:.0%} latency"}[self.kind]


def check_target(target: Any) -> Target:
    """A :class:`Target` from ``{"loss": 0.05}`` (also ``eval_metric_loss``, ``flops`` /
    ``pruned_flops``, ``latency`` / ``pruned_latency``), ``"flops=0.5"`` or a Target; a bad one is
    a one-line ConfigError."""
    if isinstance(target, Target):
        return target
    if isinstance(target, str) and "=" in target:
        key, _, value = target.partition("=")
        try:
            target = {key.strip(): float(value)}
        except ValueError:
            target = {key.strip(): value}
    names = {**{k: k for k in TARGETS}, **{v: k for k, v in TARGETS.items()}}
    if not isinstance(target, Mapping) or len(target) != 1 or next(iter(target)) not in names:
        raise ConfigError(f"adaptive target {target!r} must name one target, e.g. "
                          f"{{'loss': 0.05}}, {{'flops': 0.5}} or {{'latency': 0.4}}")
    key, value = next(iter(target.items()))
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            not 0.0 < float(value) < 1.0:
        raise ConfigError(f"adaptive target {key}={value!r} must be a fraction in (0, 1), e.g. "
                          f"{key}=0.05")
    return Target(names[key], float(value))


def check_bound(bound: Any, confidence: Any) -> None:
    """Refuse a ``bound`` other than ``exact``/``confidence`` or a confidence outside (0.5, 1)."""
    if bound not in BOUNDS:
        raise ConfigError(f"bound={bound!r} is not one of {', '.join(BOUNDS)}")
    if isinstance(confidence, bool) or not isinstance(confidence, numbers.Real) or \
            not 0.5 < float(confidence) < 1.0:
        raise ConfigError(f"confidence={confidence!r} must lie in (0.5, 1), e.g. 0.999")


# --- where to measure -----------------------------------------------------------------------
Interval = tuple[float, float]


def known_points(record: SensitivityRecord, group: str, grid: list[float]) -> dict[float, Interval]:
    """The grid points of ``group`` in ``record`` as loss intervals (a measured point: its
    value twice)."""
    out = {}
    for r, loss in record.sensitivities.get(group, {}).items():
        if r in grid:
            info = record.intervals.get(group, {}).get(r)
            out[r] = (float(info["low"]), float(info["high"])) if info else (loss, loss)
    return out


def undecided(interval: Interval, thresholds: Iterable[float]) -> bool:
    """True while some threshold lies in the interval (``low <= t < high``)."""
    low, high = interval
    return any(low <= t < high for t in thresholds)


class Planner:
    """Which point of a group to measure next so that each threshold's bracket is found. It
    depends on the group's own points and the thresholds only, so a resumed or sharded analysis
    measures the same points as an uninterrupted one."""

    def __init__(self, grid: list[float], top_down: bool = False, steps: int = 1):
        self.grid = sorted({ratio_key(r) for r in grid})  # as the record stores them
        self.top_down, self.steps = top_down, steps

    @classmethod
    def for_target(cls, grid: list[float], target: Target) -> "Planner":
        """The planner of ``target``'s allocation: from the top down for a loss target
        (:func:`~autoprune.engine.allocate.ratios_by_loss`' reading), brackets
        :data:`BRACKET_STEPS` apart for a FLOPs target, adjacent for a latency one (its greedy
        allocation steps along the measured points)."""
        return cls(grid, top_down=target.kind == "loss", steps=BRACKET_STEPS.get(target.kind, 1))

    def first(self) -> float:
        """A group's first probe: the top of the grid (a group no ratio harms needs no other
        point; a sensitive group's top is decided far over any threshold after a few dozen
        images)."""
        return self.grid[-1]

    def next_point(self, known: Mapping[float, Interval], thresholds: Iterable[float]
                   ) -> float | None:
        """The ratio to measure or refine next, or None when every threshold's bracket is
        resolved."""
        for t in sorted(thresholds):
            need = self._from_top(known, t) if self.top_down else self._need(known, t)
            if need is not None:
                return need
        return None

    def _from_top(self, known: Mapping[float, Interval], t: float) -> float | None:
        """The highest grid point within ``t`` as :func:`~autoprune.engine.allocate.ratios_by_loss`
        reads a table (from the top down: a point within ``t`` above a point over it counts):
        every point above it measured and decided over ``t``, it decided within."""
        for r in reversed(self.grid):
            if r not in known:
                return r
            low, high = known[r]
            if high <= t:
                return None
            if low <= t:
                return r  # undecided: more images
        return None

    def _bracket(self, known: Mapping[float, Interval], t: float) -> tuple[int, int]:
        """``(a, b)``: ``b`` the first measured point not decided within ``t`` (its upper end
        over ``t``: over it, or undecided), ``a`` the last measured point before ``b`` (-1:
        ratio 0; ``len(grid)`` for ``b``: none)."""
        grid, m = self.grid, len(self.grid)
        over = [i for i, r in enumerate(grid) if r in known and known[r][1] > t]
        b = min(over) if over else m
        before = [i for i, r in enumerate(grid[:b]) if r in known]
        return (max(before) if before else -1), b

    def _need(self, known: Mapping[float, Interval], t: float) -> float | None:
        """The bracket of ``t`` as every allocation reads a curve (the first point over ``t``
        ends it: pruning more never counts as less harmful): resolved when the points up to
        the last one within ``t`` and the next grid point, decided over ``t``, are measured;
        with ``steps`` 2, a point decided over ``t`` two grid points above it does when the
        curve is flat across them (:meth:`_flat`). The grid point between is then left
        unmeasured: the allocation interpolates its ratio across it, and for a curve that does
        not fall between the two that lands within one grid step of the ratio read with that
        point measured. A FLOPs target's brackets sit at a few images' loss, where each point
        needs every image, and flat, noise-level curves were bisected down to adjacent points
        (replayed: -5.5 % of the images over fifteen FLOPs rows, allocations as close)."""
        grid, m = self.grid, len(self.grid)
        a, b = self._bracket(known, t)
        if b == m:
            return None if a == m - 1 else self._probe(known, t, a, b)
        if known[grid[b]][0] <= t:  # undecided: more images before any point below it
            return grid[b]
        if b <= a + 1:
            return None
        if b <= a + self.steps and self._flat(known, t, a, b):
            return None
        return self._probe(known, t, a, b)

    def _flat(self, known: Mapping[float, Interval], t: float, a: int, b: int) -> bool:
        """True when the curve rises by at most :data:`FLAT_RISE` thresholds across the bracket
        (from the lower end of ``a``'s interval, 0 at ratio 0, to the upper end of ``b``'s): a
        reading interpolated across its middle then errs by at most that rise in loss, where a
        steep bracket (a stem's 0.03 -> 0.37 around 0.03) would move the common threshold."""
        low = 0.0 if a < 0 else known[self.grid[a]][0]
        return known[self.grid[b]][1] - low <= t * FLAT_RISE

    def _probe(self, known: Mapping[float, Interval], t: float, a: int, b: int) -> float:
        """The unmeasured grid point between ``a`` and ``b`` nearest the expected crossing."""
        grid = self.grid
        guess = self._guess(known, t, a, b)
        return grid[min(range(a + 1, min(b, len(grid))), key=lambda i: (abs(grid[i] - guess), i))]

    def _guess(self, known: Mapping[float, Interval], t: float, a: int, b: int) -> float:
        """Where the curve is expected to cross ``t``: a chord between the bracket's ends
        (interval middles); with only one end measured (nothing within ``t``, or nothing over
        it), a curve through the origin growing as the ratio squared (sensitivity curves bend
        upward: a chord from the origin to the top ratio would probe far too low)."""
        grid, m = self.grid, len(self.grid)
        mid = lambda r: sum(known[r]) / 2
        ra, la = (0.0, 0.0) if a < 0 else (grid[a], mid(grid[a]))
        if b < m:
            rb, lb = grid[b], mid(grid[b])
            if a < 0 and lb > t > 0:
                return rb * math.sqrt(t / lb)
            return ra + (t - la) * (rb - ra) / (lb - la) if lb > la else (ra + rb) / 2
        if a < 0:
            return self.first()
        return ra * math.sqrt(t / la) if la > 0 else grid[-1]


def threshold_for(flops: FlopsModel, table: Mapping[str, Mapping[float, float]], goal: float,
                  max_ratio: float = 0.9) -> float:
    """The common loss threshold at which :func:`ratios_by_flops`' allocation of ``table``
    (predicted MACs) removes ``goal`` of the FLOPs; the largest loss of the table when even that
    removes less."""
    anchored = {g: threshold_curve(p) for g, p in table.items() if p}
    losses = [v for c in anchored.values() for v in c.values()]
    if not losses:
        return math.inf

    def reduction(t: float) -> float:
        ratios = {g: min(ratio_for_loss(c, t), max_ratio) for g, c in anchored.items()}
        return 1.0 - flops.predict(ratios) / flops.total

    lo, hi = min(losses) - 1.0, max(losses)
    if reduction(hi) < goal:
        return hi
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if reduction(mid) < goal else (lo, mid)
    return hi


class Thresholds:
    """The loss thresholds the allocation for ``target`` needs, estimated from the table."""

    def __init__(self, target: Target, flops: Callable[[], FlopsModel]):
        self.target = target
        self._flops, self._model = flops, None
        self.history: list[list[float]] = []

    def goals(self) -> list[float]:
        v = self.target.value
        if self.target.kind == "latency":
            return [v, min(0.95, v / LATENCY_EFFICIENCY)]
        return [v]

    def estimate(self, table: Mapping[str, Mapping[float, float]], top: float) -> list[float]:
        """The thresholds at which the current table meets the target (the tolerance itself for
        a loss target). A group whose largest measured ratio is below ``top`` (the grid's
        largest) is read with the curve extended to it (:func:`extended`), else the estimate
        starts high and falls round after round as the groups' upper ratios get measured."""
        if self.target.kind == "loss":
            return [self.target.value]
        if self._model is None:
            self._model = self._flops()
        table = {g: extended(p, top) for g, p in table.items()}
        return sorted({threshold_for(self._model, table, g) for g in self.goals()})


def next_round(thresholds: Thresholds, planner: Planner,
               known: Mapping[str, Mapping[float, Interval]]) -> tuple[list[float], list[str]]:
    """The thresholds a round resolves and the groups that need a point at them: estimated
    first from the table with each point decided early read at its interval's middle, and, when
    that leaves no group needing a point, at its upper end (as the allocation reads it), so the
    rounds end only once the allocation's own threshold is resolved."""
    now: list[float] = []
    for read in (lambda iv: (iv[0] + iv[1]) / 2, lambda iv: iv[1]):
        now = thresholds.estimate({g: {r: read(iv) for r, iv in p.items()}
                                   for g, p in known.items()}, planner.grid[-1])
        work = [g for g in known if planner.next_point(known[g], now) is not None]
        if work:
            return now, work
    return now, []


def round_points(planner: Planner, known: Mapping[str, Mapping[float, Interval]],
                 work: Iterable[str], thresholds: Iterable[float]) -> dict[str, float]:
    """The one point each group of ``work`` measures (or refines) in a round at ``thresholds``
    (groups that need none left out): chosen from the table as the round starts, so a round
    resumed after a kill, or shared over torchrun ranks, measures the same points."""
    thresholds = list(thresholds)
    points = {name: planner.next_point(known[name], thresholds) for name in work}
    return {name: r for name, r in points.items() if r is not None}


def extended(points: Mapping[float, float], top: float) -> dict[float, float]:
    """A group's measured points plus, where ``top`` is not measured, an expected loss there: a
    curve through the origin growing as the ratio squared from the last measured point (as
    :meth:`Planner._guess`). It only orders the work: once a group's bracket is resolved its top
    is measured or a point over the threshold is, and the allocation reads the same ratio with
    or without it."""
    out = dict(points)
    if out and top not in out:
        last = max(out)
        if last < top:
            out[top] = out[last] * (top / last) ** 2
    return out
