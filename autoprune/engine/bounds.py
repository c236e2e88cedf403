"""Bounds on a point's full-set metric from the part of the evaluation data seen so far.

An adaptive analysis (:mod:`autoprune.engine.adaptive`) stops evaluating a point's images once its
loss is decided for the allocation: its interval lies wholly below or above every loss
threshold that matters. Two bounds for a metric that is a mean of per-image scores (top-1
accuracy: 1 for a correct image, 0 for a wrong one), over ``N`` images of which ``n`` are seen:

- ``"exact"`` (deterministic): the unseen images may each score anything in [0, 1], so the mean
  lies in ``[S/N, (S + N - n)/N]`` (``S``: the seen scores' sum). A decision taken from it is the
  decision the full evaluation would take, always.
- ``"confidence"`` (statistical, the images visited in a seeded uniformly random order): paired
  with the unpruned model's score on every image, only *flips* change the metric: ``D`` images
  the baseline gets right and the pruned model wrong, ``U`` the reverse. Among the ``N1``
  baseline-correct images, the ``n1`` seen are a uniformly random subset (sampling without
  replacement), so ``D`` is bounded by inverting the hypergeometric tail (exact, no normal
  approximation); likewise ``U`` among the ``N0`` baseline-wrong images. Each of the four
  one-sided bounds holds with probability at least ``1 - alpha``; an analysis looks at a point
  at most ``looks`` times (a fixed geometric schedule of image counts, :func:`look_points`) and
  sets ``alpha = (1 - confidence) / (4 * looks)``, so by the union bound every interval it ever
  reports for that point holds together with probability at least ``confidence``. A point
  evaluated on every image is exact in both modes.

Metrics that are not a mean over images (mIoU, mAP) come with their own sure bounds from the
task (:class:`~autoprune.engine.incremental.Step` ``low``/``high``), or with none.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

BOUNDS = ("exact", "confidence")


class _LogFactorials:
    """``log(k!)`` for k = 0..n, grown on demand (float64)."""

    def __init__(self) -> None:
        self.table = torch.zeros(1, dtype=torch.float64)

    def upto(self, n: int) -> torch.Tensor:
        if len(self.table) <= n:
            self.table = torch.lgamma(torch.arange(n + 2, dtype=torch.float64) + 1)
        return self.table


_LOG_FACT = _LogFactorials()


def hypergeom_cdf(k: int, total: int, successes: int, draws: int, upper: bool = False) -> float:
    """``P(X <= k)`` (``upper``: ``P(X >= k)``) for ``X`` the successes among ``draws`` items taken
    without replacement from ``total`` items of which ``successes`` are successes."""
    lo, hi = max(0, draws - (total - successes)), min(draws, successes)
    first, last = (k, hi) if upper else (lo, k)
    first, last = max(first, lo), min(last, hi)
    if first > last:
        return 0.0
    if (first, last) == (lo, hi):
        return 1.0
    f = _LOG_FACT.upto(total)
    j = torch.arange(first, last + 1)
    log_p = (f[successes] - f[j] - f[successes - j]
             + f[total - successes] - f[draws - j] - f[total - successes - draws + j]
             - (f[total] - f[draws] - f[total - draws]))
    return float(torch.logsumexp(log_p, 0).exp().clamp(max=1.0))


def successes_interval(k: int, draws: int, total: int, alpha: float) -> tuple[int, int]:
    """``(low, high)``: the fewest and most successes the whole population of ``total`` may hold
    when ``draws`` items taken uniformly without replacement held ``k`` (each side wrong with
    probability at most ``alpha``; exact inversion of the hypergeometric tails)."""
    least, most = k, total - (draws - k)
    if draws >= total:
        return k, k
    # the largest K whose P(X <= k) is still above alpha (P falls as K grows)
    lo, hi = least, most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if hypergeom_cdf(k, total, mid, draws) > alpha:
            lo = mid
        else:
            hi = mid - 1
    high = lo
    # the smallest K whose P(X >= k) is still above alpha (P grows with K)
    lo, hi = least, most
    while lo < hi:
        mid = (lo + hi) // 2
        if hypergeom_cdf(k, total, mid, draws, upper=True) > alpha:
            hi = mid
        else:
            lo = mid + 1
    return lo, high


def look_points(total: int, first: int = 32, growth: float = 1.5) -> list[int]:
    """The image counts at which an adaptive analysis looks at a point's bound: ``first``, then
    ``growth`` times more each look, below ``total`` (the full count is exact, not a look)."""
    looks, n = [], max(1, first)
    while n < total:
        looks.append(n)
        n = max(n + 1, math.ceil(n * growth))
    return looks


@dataclass
class PairedCounts:
    """What the images seen so far say about one point, paired with the unpruned model's
    per-image scores: ``seen`` images, ``score`` their summed scores, and for binary scores the
    flips ``down`` (baseline right, pruned wrong) and ``up`` among ``seen1`` baseline-right and
    ``seen0`` baseline-wrong images seen."""

    seen: int = 0
    score: float = 0.0
    down: int = 0
    up: int = 0
    seen1: int = 0
    seen0: int = 0

    def add(self, scores: torch.Tensor, base: torch.Tensor) -> None:
        """Add a step's per-image ``scores`` and the baseline's ``base`` for the same images."""
        scores, base = scores.detach().double().cpu(), base.double()
        self.seen += len(scores)
        self.score += float(scores.sum())
        right = base > 0.5
        self.seen1 += int(right.sum())
        self.seen0 += len(base) - int(right.sum())
        self.down += int(((scores < 0.5) & right).sum())
        self.up += int(((scores > 0.5) & ~right).sum())

    def to_json(self) -> dict[str, float]:
        return {"seen": self.seen, "score": self.score, "down": self.down, "up": self.up,
                "seen1": self.seen1, "seen0": self.seen0}

    @classmethod
    def of(cls, data: dict) -> "PairedCounts":
        return cls(int(data["seen"]), float(data["score"]), int(data["down"]), int(data["up"]),
                   int(data["seen1"]), int(data["seen0"]))


def mean_interval(counts: PairedCounts, base: torch.Tensor, *, bound: str, alpha: float,
                  binary: bool) -> tuple[float, float]:
    """``(low, high)`` of the mean score over all ``len(base)`` images (``base``: the unpruned
    model's score of every image, in evaluation order) given ``counts`` (see the module
    docstring). ``binary``: every score is 0 or 1 (needed for the ``"confidence"`` bound; a
    non-binary metric is always bounded ``"exact"``)."""
    total = len(base)
    if counts.seen >= total:
        value = counts.score / total
        return value, value
    if bound == "confidence" and binary:
        right = int((base > 0.5).sum())
        d_lo, d_hi = successes_interval(counts.down, counts.seen1, right, alpha)
        u_lo, u_hi = successes_interval(counts.up, counts.seen0, total - right, alpha)
        base_sum = float(base.double().sum())
        return (base_sum - d_hi + u_lo) / total, (base_sum - d_lo + u_hi) / total
    return counts.score / total, (counts.score + total - counts.seen) / total
