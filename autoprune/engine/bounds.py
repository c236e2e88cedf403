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
  the baseline gets right and the pruned model wrong, ``U`` the reverse, so the mean is the
  baseline's less ``(D - U) / N``. Given how many seen images the baseline gets right, the seen
  ones among its ``N1`` right images are a uniformly random subset of them (sampling without
  replacement), likewise among its ``N0`` wrong ones, the two independent; the net ``D - U`` is
  bounded *jointly* (:func:`net_interval`: each end an exact one-sided test on the product of
  the two hypergeometric laws, no normal approximation), which is narrower than bounding ``D``
  and ``U`` alone and subtracting (the widths add) when a model flips many images both ways.
  Where a stratum is unseen each count is bounded alone (:func:`successes_interval`). Either way
  an interval is wrong with probability at most ``4 * alpha``; an analysis looks at a point at
  most ``looks`` times (a fixed geometric schedule of image counts, :func:`look_points`) and
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


def _pmf_rows(total: int, successes: torch.Tensor, draws: int, support: torch.Tensor
              ) -> torch.Tensor:
    """``P(X = support[c])`` for each row's ``successes`` (a row per entry), ``X`` hypergeometric
    as in :func:`hypergeom_cdf`; 0 outside each row's support. Shape ``(rows, len(support))``."""
    f = _LOG_FACT.upto(total)
    k, j = successes[:, None], support[None, :]
    valid = (j >= 0) & (j <= k) & (draws - j >= 0) & (draws - j <= total - k)

    def at(i: torch.Tensor) -> torch.Tensor:
        return f[i.clamp(0, total)]

    log_p = (at(k) - at(j) - at(k - j) + at(total - k) - at(draws - j)
             - at(total - k - draws + j) - (f[total] - f[draws] - f[total - draws]))
    return torch.where(valid, log_p.exp(), torch.zeros((), dtype=log_p.dtype))


def _band(draws: int, total: int, low: int, high: int) -> torch.Tensor:
    """The sample counts where ``draws`` taken from ``total`` items holding ``low`` .. ``high``
    successes have nearly all their mass (mean +- 8 sd + 2, clamped to what is possible)."""
    share = min(max(low / total, 0.5), high / total)  # the share of most variance in the range
    spread = 8.0 * math.sqrt(draws * share * (1 - share) * max(0.0, 1 - draws / total)) + 2
    first = max(0, math.floor(draws * low / total - spread))
    last = min(draws, math.ceil(draws * high / total + spread))
    return torch.arange(first, last + 1)


def _net_high(d: int, n1: int, total1: int, box1: tuple[int, int], u: int, n0: int, total0: int,
              box0: tuple[int, int], alpha: float, coarse: int = 32) -> int | None:
    """The largest ``D - U`` that a one-sided test at level ``alpha`` does not reject, over
    ``D`` in ``box1`` and ``U`` in ``box0`` (see :func:`net_interval`); None if it rejects all.

    ``D``: successes among ``total1`` items of which ``n1`` drawn held ``d``; ``U`` likewise
    (``total0``, ``n0``, ``u``), the two draws independent. The statistic ``T = d total1 / n1 -
    u total0 / n0`` estimates ``D - U``; ``(D, U)`` is rejected when ``P(T <= T_seen) <= alpha``
    under it. Probabilities are computed on bands of the sample counts with the mass left out
    added, so each is an upper estimate and nothing that the exact test keeps is rejected.

    For each ``D`` the test keeps every ``U`` from a fewest one up (the probability grows with
    ``U``), and that fewest ``U`` never falls as ``D`` grows (the probability falls with ``D``),
    so between two ``D`` a stride apart ``D - U`` is at most the later ``D`` less the earlier
    one's fewest ``U``: the search solves ``coarse`` rows, then only the strides that bound
    could still beat."""
    band1 = _band(n1, total1, box1[0], box1[1])
    band0 = _band(n0, total0, box0[0], box0[1])
    # T <= T_seen  <=>  u >= u + ceil((d' - d) total1 n0 / (total0 n1)), integers throughout
    need = u - torch.div(-(band1 - d) * total1 * n0, total0 * n1, rounding_mode="floor")
    index = (need - int(band0[0])).clamp(0, len(band0))[None, :]
    none = box0[1] + 1

    def fewest_kept(rows: torch.Tensor) -> torch.Tensor:
        """Per ``D`` in ``rows``: the fewest ``U`` in the box the test keeps (``none``)."""
        pmf1 = _pmf_rows(total1, rows, n1, band1)
        lost1 = (1.0 - pmf1.sum(1)).clamp(min=0.0)
        at = index.expand(len(rows), -1)

        def kept(us: torch.Tensor) -> torch.Tensor:
            pmf0 = _pmf_rows(total0, us, n0, band0)
            lost0 = (1.0 - pmf0.sum(1)).clamp(min=0.0)[:, None]
            tail = pmf0.flip(1).cumsum(1).flip(1) + lost0  # P(u' >= band0[i]), an upper estimate
            tail = torch.cat([tail, lost0], 1)
            return ((pmf1 * tail.gather(1, at)).sum(1) + lost1).clamp(max=1.0) > alpha

        low = torch.full_like(rows, box0[0] - 1)  # not kept here (or below the box)
        high = torch.full_like(rows, box0[1])  # kept here
        some = kept(high)
        low = torch.where(some, low, high)  # a row the test keeps no U of is done
        while bool((active := high - low > 1).any()):
            mid = torch.where(active, torch.div(low + high, 2, rounding_mode="floor"), high)
            hit = kept(mid)
            high = torch.where(active & hit, mid, high)
            low = torch.where(active & ~hit, mid, low)
        return torch.where(some, high, torch.full_like(high, none))

    rows = torch.arange(box1[0], box1[1] + 1)
    stride = max(1, -(-len(rows) // coarse))
    solved = torch.unique(torch.cat([rows[::stride], rows[-1:]]))
    fewest = fewest_kept(solved)
    if int(fewest[0]) == none:  # the box's fewest D is rejected for every U: so is every D
        return None
    best = int((solved - fewest)[fewest != none].max())
    between = [torch.arange(a + 1, b) for a, b, f in
               zip(solved.tolist(), solved[1:].tolist(), fewest.tolist())
               if f != none and b - 1 - f > best and b - a > 1]
    if between:
        more = torch.cat(between)
        fewer = fewest_kept(more)
        if bool((fewer != none).any()):
            best = max(best, int((more - fewer)[fewer != none].max()))
    return best


def net_interval(down: int, seen1: int, right: int, up: int, seen0: int, wrong: int,
                 alpha: float) -> tuple[int, int] | None:
    """``(low, high)`` of the net flips ``D - U`` over the whole set, or None where the joint
    bound does not apply (a stratum unseen or empty): each end wrong with probability at most
    ``alpha``, the pair together at most ``2.04 * alpha``.

    ``D`` (``down`` of ``seen1`` seen among the ``right`` baseline-right images) and ``U``
    (``up`` of ``seen0`` among the ``wrong`` others) are bounded *jointly*: bounding each alone
    and subtracting adds their two widths, while their difference varies only as the root of
    the summed squares. Given how many seen images the baseline gets right, the seen ones of
    each stratum are a uniform sample of it, the two independent, so the probability of the
    seen counts under any ``(D, U)`` is a product of two hypergeometric terms; each end is the
    extreme ``D - U`` that an exact one-sided test at level ``alpha`` does not reject. The
    search runs over a box of plausible ``(D, U)`` (each alone at level ``alpha / 100``), which
    the union bound charges."""
    if min(seen1, seen0) < 1 or seen1 >= right and seen0 >= wrong:
        return None
    tiny = alpha / 100
    box1 = successes_interval(down, seen1, right, tiny)
    box0 = successes_interval(up, seen0, wrong, tiny)
    high = _net_high(down, seen1, right, box1, up, seen0, wrong, box0, alpha)
    low = _net_high(up, seen0, wrong, box0, down, seen1, right, box1, alpha)
    if high is None or low is None:
        return None
    return -low, high


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
    docstring), wrong with probability at most ``4 * alpha``. ``binary``: every score is 0 or 1
    (needed for the ``"confidence"`` bound; a non-binary metric is always bounded ``"exact"``)."""
    total = len(base)
    if counts.seen >= total:
        value = counts.score / total
        return value, value
    if bound == "confidence" and binary:
        right = int((base > 0.5).sum())
        base_sum = float(base.double().sum())
        # the joint bound spends the four one-sided bounds' 4 alpha on its two ends and box
        net = net_interval(counts.down, counts.seen1, right, counts.up, counts.seen0,
                           total - right, 4 * alpha / 2.04)
        if net is not None:
            return (base_sum - net[1]) / total, (base_sum - net[0]) / total
        d_lo, d_hi = successes_interval(counts.down, counts.seen1, right, alpha)
        u_lo, u_hi = successes_interval(counts.up, counts.seen0, total - right, alpha)
        return (base_sum - d_hi + u_lo) / total, (base_sum - d_lo + u_hi) / total
    return counts.score / total, (counts.score + total - counts.seen) / total
