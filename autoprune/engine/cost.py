"""What an analysis will cost on this machine, said before it starts: points, images, seconds per
image (timed on a few batches of the unpruned model) and an ETA.

A point's images cost what the unpruned model's do, scaled by the share of the model's MACs the
point still computes: the group's layers are narrower, and the stages before its first touched
layer are replayed from the prefix cache (:mod:`autoprune.engine.prefix_cache`) instead of
computed. An adaptive analysis's count of points and images depends on what it measures: a
pilot predicts which points and how many images each (:mod:`autoprune.engine.adaptive_eta`:
per-image top-1 flips, or the metric of the first images where the metric is mAP or mIoU), each
point then costed at its own share; where no pilot can be read (an evaluation that does not
report as it goes) the estimate uses the typical share measured by
``benchmarks/analysis_cost.py`` (at most the full analysis's). The progress bar's ETA follows
the images actually evaluated.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import torch.nn as nn

from .allocate import FlopsModel
from .groups import PruningGraph
from .incremental import close_steps
from .points import PointRunner, eval_mode
from .prefix_cache import PrefixCache
from .progress import duration

# the part of an image's evaluation time that does not shrink with the MACs a point computes
# (per-layer overhead, the replayed stages' copies, the metric), when it cannot be timed
FIXED = 0.3
# an adaptive analysis's typical points per group (ratio grid of 9) and share of a point's images,
# by target and bound (benchmarks/analysis_cost.py, benchmarks/README.md "Analysis cost")
# (resnet18, mobilenetv3, YOLOv8n and Unet on the scaled-down benchmark evaluated 16-32 % of the
# full analysis's images for a loss target, 24-45 % for a FLOPs target, 53 % for a latency one)
# (FLOPs targets, replayed on every point's per-image scores at 1,000 images: resnet18 12 groups
# 0.33-0.37 of the points at 0.96-0.98 of their images, mobilenetv3_large_100 30 groups 0.30-0.34
# at 0.81-0.91, for -30/-50/-70 %; their threshold is a few images' loss, where a point needs
# most of its images)
# (loss targets, measured from the top ratio down, replayed at 1,000 images: resnet18 0.34-0.40
# of the points at 0.37-0.46 of their images, mobilenetv3_large_100 0.54-0.79 at 0.51-0.55, for
# tolerances 0.02-0.1: a model with many sensitive groups measures more points above the
# crossing; that spread, not the machine, is what an ETA said before any point can miss)
ADAPTIVE_POINTS = {"loss": 4.5, "flops": 3.0, "latency": 5.0}
ADAPTIVE_IMAGES = {("loss", "confidence"): 0.47, ("flops", "confidence"): 0.9,
                   ("latency", "confidence"): 0.9, "exact": 0.95, "none": 1.0}
# ... those shares are at 1,000 images a point: the confidence bound decides a point after a
# count of images that grows more slowly than the set, so above it the share falls as
# (1,000 / images) ** (1/3) for a loss target (resnet18's: 0.60 of a point's images at 1,000, 0.22
# at 10,000; mobilenetv3 0.42 at 10,000); not for FLOPs / latency targets, whose threshold is a
# few images' loss, where a point needs nearly every image at any size (resnet18 -50 %, replayed:
# 0.93 of its images at 5,000)
SHARE_AT_IMAGES, SHARE_EXPONENT = 1000, 1 / 3
# a full analysis expected to take this long (s) says how to measure less: the adaptive analysis
LONG_ANALYSIS_S = 1800.0
ADAPTIVE_HINT = ("[autoprune] this full analysis measures every point on every image; an adaptive "
                 "one measures only what one target's allocation needs (4-13x fewer images for a "
                 "tolerated loss on the classification and segmentation benchmarks, "
                 "benchmarks/README.md \"Analysis cost\"): sensitivity_options={'adaptive': True} "
                 "in train() (its own target), or `autoprune sensitivity ... --adaptive --target "
                 "loss=0.05`")


def point_shares(graph: PruningGraph, example_inputs: Any, points: Iterable[tuple[str, float]],
                 cache: PrefixCache | None, criterion: str = "l1_norm",
                 flops: FlopsModel | None = None) -> dict[tuple[str, float], float]:
    """Per point, the share of the unpruned model's MACs it computes (pruned layers narrower,
    replayed stages not computed)."""
    flops = flops or FlopsModel(graph, example_inputs)
    skipped: dict[str, float] = {}
    out = {}
    for name, ratio in points:
        if name not in skipped:
            skipped[name] = _replayed_macs(graph, flops, cache, name)
        left = flops.predict({name: ratio}) - skipped[name]
        out[(name, ratio)] = max(0.02, left / max(1, flops.total))
    return out


def _replayed_macs(graph: PruningGraph, flops: FlopsModel, cache: PrefixCache | None,
                   name: str) -> float:
    if cache is None or not cache.enabled:
        return 0.0
    first = cache.first_touched(graph.touched_modules(graph.group(name)))
    macs = 0.0
    for stage, module in cache.stages:
        if stage in cache.span and cache.span[stage][1] < first:
            macs += sum(flops.layers.get(m, 0.0) for m in module.modules())
    return macs


@dataclass
class Estimate:
    """An analysis's expected cost: ``points`` x ``images`` each at ``seconds_per_image`` scaled
    by each point's share (``shares``), plus ``overhead`` seconds a point (prune, restore);
    ``adaptive``: the expected share of points and images an adaptive analysis evaluates."""

    points: int
    images: int
    seconds_per_image: float
    shares: list[float] = field(default_factory=list)
    overhead: float = 0.0
    adaptive: dict[str, Any] | None = None
    fixed: float = FIXED  # the part of an image's time that does not shrink with the MACs
    share_of: dict[tuple[str, float], float] = field(default_factory=dict)  # per point
    timed_on: str = "a few batches"  # what seconds_per_image was timed on

    @property
    def full_images(self) -> int:
        return self.points * self.images

    @property
    def full_seconds(self) -> float:
        work = sum(self.fixed + (1.0 - self.fixed) * s for s in self.shares)
        return work * self.images * self.seconds_per_image + self.points * self.overhead

    @property
    def expected_images(self) -> int:
        if not self.adaptive:
            return self.full_images
        return int(self.full_images * self.adaptive["points_share"] * self.adaptive["image_share"])

    @property
    def seconds(self) -> float:
        """The expected wall time of the points (the ETA)."""
        if not self.adaptive:
            return self.full_seconds
        plan = self.adaptive.get("predicted")
        if plan and self.share_of:  # the predicted points, each at its own cost (the pilot
            # that predicted them has run by the time the ETA is said, and the images it
            # evaluated are handed on), plus the bound's arithmetic at each look
            done = self.adaptive.get("handed_on", {})
            work = sum((self.fixed + (1.0 - self.fixed) * self.share_of.get(p, 1.0)) *
                       max(0, n - done.get(p, 0)) for p, n in plan.items())
            looks = self.adaptive.get("looks", 0) * self.adaptive.get("look_seconds", 0.0)
            points = self.adaptive.get("points_expected", len(plan))
            return work * self.seconds_per_image + points * self.overhead + looks
        per_point = self.full_seconds / max(1, self.points)
        points = self.points * self.adaptive["points_share"]
        return points * (per_point - self.overhead) * self.adaptive["image_share"] + \
            points * self.overhead

    def describe(self) -> str:
        """The estimate in one or two lines (what the analysis prints before it starts); a full
        analysis of half an hour or more adds how to measure less (:data:`ADAPTIVE_HINT`)."""
        head = (f"[autoprune] analysis cost: {self.points} points x {self.images:,} images = "
                f"{self.full_images:,} images, {self.seconds_per_image * 1e3:.2f} ms/image here "
                f"(timed on {self.timed_on})")
        if not self.adaptive:
            hint = f"\n{ADAPTIVE_HINT}" if self.full_seconds >= LONG_ANALYSIS_S else ""
            return f"{head}, ETA {duration(self.full_seconds)}{hint}"
        a = self.adaptive
        return (f"{head}; the full analysis would take {duration(self.full_seconds)}.\n"
                f"[autoprune] adaptive ({a['target']}, bound {a['bound']}): expected about "
                f"{self.points * a['points_share']:.0f} points and {self.expected_images:,} "
                f"images, ETA {duration(self.seconds)} (at most the full analysis"
                + (f"; predicted from a pilot: {a['pilot']})" if a.get("pilot") else ")"))


def adaptive_shares(target_kind: str, bound: str, grid: int,
                    images: int | None = None) -> dict[str, float]:
    """The expected share of a full analysis's points and of each point's images that an
    adaptive analysis evaluates (``grid``: ratios per group; ``images``: a point's images, the
    validation set)."""
    points = min(1.0, ADAPTIVE_POINTS[target_kind] * math.log2(grid + 1) / math.log2(10) / grid)
    share = ADAPTIVE_IMAGES.get((target_kind, bound), ADAPTIVE_IMAGES.get(bound, 1.0))
    if bound == "confidence" and target_kind == "loss" and images and images > SHARE_AT_IMAGES:
        share *= (SHARE_AT_IMAGES / images) ** SHARE_EXPONENT
    return {"points_share": points, "image_share": share}


def time_steps(steps: Iterable[Any], min_seconds: float = 0.5, max_steps: int = 4
               ) -> float | None:
    """Seconds per image over a few steps of an incremental evaluation (the first, which warms
    up, not timed): the median of the steps' per-image times, so that one step slowed by
    another process on a shared CPU does not set the ETA (Unet-resnet18's FLOPs analysis timed
    23.5 ms an image where its two others timed 15.3 and 18.1, and said 25 s for 17); None
    when there are too few steps."""
    rates: list[float] = []
    start = last = None
    for k, step in enumerate(steps):
        now = time.perf_counter()
        if k == 0:
            start = last = now
            continue
        if int(step.images) > 0:
            rates.append((now - last) / int(step.images))
        last = now
        if k >= max_steps or now - start >= min_seconds:
            break
    close_steps(steps)
    return statistics.median(rates) if rates else None


def estimate(model: nn.Module, example_inputs: Any, eval_fn: Any, graph: PruningGraph,
             runner: PointRunner, points: list[tuple[str, float]], images: int, *,
             timed: float | None = None, replayed: float | None = None,
             adaptive: dict[str, Any] | None = None) -> Estimate:
    """The cost of evaluating ``points`` on ``images`` images each: seconds per image timed on a
    few batches of the unpruned model where the evaluation reports as it goes (its incremental
    evaluation, warm: the first batch not timed), else ``timed`` (seconds of one whole
    evaluation already made), else one evaluation timed now; a point's prune and restore timed
    once. (The whole evaluation already made is the prefix cache's recording or the folded
    check's: YOLOv8n's at 128 px took 1.36 s where its points' took 0.57, and the full
    analysis's ETA said 134 s for 61.) ``replayed``: seconds of the
    prefix cache's check (the unpruned model with the stages before the deepest group replayed),
    which tells how much of an image's time does not shrink with the MACs. Where the points
    are evaluated folded (``runner.folded``), so is what is timed."""
    per_image, timed_on = None, "a few batches"
    if getattr(eval_fn, "incremental", None) is not None:
        with eval_mode(model), runner.folded():
            per_image = time_steps(eval_fn.incremental(model, start=0))
    if per_image is None:
        if timed is None:
            start = time.perf_counter()
            with eval_mode(model), runner.folded():
                eval_fn(model)
            timed = time.perf_counter() - start
        per_image, timed_on = timed / max(1, images), "one whole evaluation"
    overhead = runner.setup_seconds(*points[len(points) // 2])
    flops = FlopsModel(graph, example_inputs)
    shares = point_shares(graph, example_inputs, points, runner.cache, runner.criterion, flops)
    fixed = FIXED
    if replayed and runner.cache is not None and runner.cache.enabled:
        cache = runner.cache
        deepest = max({n for n, _ in points},
                      key=lambda n: cache.first_touched(graph.touched_modules(graph.group(n))))
        share = 1.0 - _replayed_macs(graph, flops, cache, deepest) / max(1, flops.total)
        if share < 0.9:  # enough replayed to tell the fixed part from the MACs' part
            measured = replayed / (per_image * images)
            fixed = min(1.0, max(0.0, (measured - share) / (1.0 - share)))
    return Estimate(len(points), images, per_image, [shares[p] for p in points], overhead,
                    adaptive, fixed, shares, timed_on)


def announce(model: nn.Module, example_inputs: Any, eval_fn: Any, graph: PruningGraph,
             runner: PointRunner, points: list[tuple[str, float]], timed: float | None,
             adaptive: dict[str, Any] | None = None, images: int | None = None,
             replayed: float | None = None) -> Estimate:
    """Print what the analysis of ``points`` is expected to cost here (and return it)."""
    images = images or eval_fn.per_call
    if not images:  # an eval_fn that does not say how many images it evaluates: one call timed
        images = 1
    cost = estimate(model, example_inputs, eval_fn, graph, runner, points, images, timed=timed,
                    replayed=replayed, adaptive=adaptive)
    print(cost.describe(), flush=True)
    return cost


def wall(cost: Estimate | None, start: float) -> dict[str, float]:
    """This session's wall time for the points (``seconds``) and the ETA said before them
    (``eta_s``, when an estimate was made)."""
    out = {"seconds": round(time.perf_counter() - start, 3)}
    if cost is not None:
        out["eta_s"] = round(cost.seconds, 3)
    return out
