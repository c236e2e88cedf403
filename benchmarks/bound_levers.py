"""What else could stop a point's images sooner (issue 41): the adaptive analysis's bound against
five changes to it, each point of a replayed full table decided against each threshold.

An adaptive analysis spends most of its images on points whose loss lies near a threshold (they
need every image) and on points it proves within a threshold (about ``-ln(alpha) / threshold``
images for a point that flips nothing). This script reads what ``adaptive_replay.py`` kept (each
point's per-image top-1 in the evaluation's seeded order, ``<replay>/<model>/scores.pt``), and
for every point of the full table and every threshold counts the images after which the bound
decides it, as :class:`~autoprune.engine.adaptive_meter.PointMeter` looks (``now``), and under:

- ``zone +-25 % / +-50 %``: also stopped once the interval lies within that share of the
  threshold (an indifference zone: either reading then lands within about a ratio step);
- ``alpha by images``: the bound's error spent on the looks in proportion to their images (late
  looks, where points are proven within, get more of it than the first ones);
- ``looks x1.25``: that, with looks 1.25x apart instead of 1.5x (less overshoot, more looks);
- ``margin strata``: the images split by the unpruned model's margin (top-1 less top-2
  probability: its lowest-margin quarter of right images with its wrong ones, ``A``, against
  the rest, ``B``; the points' flips concentrate in ``A``, printed first), visited ``A`` first
  (``uncertain first``) or in proportion (``proportional``), each stratum uniformly at random,
  the two bounded apart (``A``: the joint bound on its own, ``B``: its down-flips, the error
  split between them) and summed;
- ``neighbour as reference``: paired with the point one ratio step below in the same group
  (measured on every image, so its per-image scores are known) instead of the unpruned model:
  its exact loss plus a bound on the net flips between the two pruned models, which disagree
  on 2-4x fewer images than either does with the unpruned model. The first ratio keeps the
  unpruned model.

These count every point of the table, not the points a planner would choose, so they compare
bounds, not analyses; each looks at the exact image counts of its schedule (a real analysis
looks at the end of the evaluation step that passes one). ``--points adaptive-flops=0.5.json,...``
counts instead only the points each of those analyses (their files in the replay folder, as
``adaptive_replay.py`` left them) measured, each against that analysis's final threshold alone.
That is a bound's best case, not an analysis: the rounds decide points against thresholds that
move, and a change of order changes which points they measure. The margin strata read 1.1-1.9x
fewer images on the FLOPs targets' points so; built into the analysis and replayed, they moved
its images by -21 % to +11 %, 6 % fewer on average (benchmarks/README.md, "Uncertain first").

    python benchmarks/adaptive_replay.py --models resnet18,mobilenetv3_large_100 ...   # first
    python benchmarks/bound_levers.py --replay runs/replay --models resnet18,mobilenetv3_large_100
    python benchmarks/bound_levers.py --replay runs/replay --models resnet18 \
        --points adaptive-flops=0.5.json,adaptive-loss=0.05.json
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its neighbour adaptive_replay
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import adaptive_replay as replay  # noqa: E402
from autoprune.engine.adaptive_meter import PointMeter  # noqa: E402
from autoprune.engine.bounds import (PairedCounts, look_points, mean_interval,  # noqa: E402
                                     successes_interval)
from autoprune.flow.sensitivities import TaskEval  # noqa: E402

THRESHOLDS = (0.003, 0.01, 0.02, 0.05, 0.1)
MARGIN_SHARE = 0.25  # the lowest-margin share of the right images that joins stratum A


def base_scores_and_margins(name: str, a: argparse.Namespace, work: Path
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The unpruned model's per-image top-1 and margin, in the evaluation's order (the replay's
    base model, the task's own evaluation, its logits caught on the way)."""
    adapter, model = replay.base_model(name, a, work)
    logits: list[torch.Tensor] = []
    hook = model.register_forward_hook(lambda m, i, out: logits.append(out.detach().float()))
    try:
        base = torch.cat([s.scores.double().cpu() for s in
                          TaskEval(adapter).incremental(model, start=0)])
    finally:
        hook.remove()
    top2 = torch.cat(logits).softmax(1).topk(2, 1).values
    return base, top2[:, 0] - top2[:, 1]


class Levers:
    """Images after which each bound decides one point against one threshold."""

    def __init__(self, base: torch.Tensor, margin: torch.Tensor, confidence: float):
        self.base, self.total, self.confidence = base, len(base), confidence
        self.meter = PointMeter(None, base, len(base), float(base.mean()), True,
                                bound="confidence", confidence=confidence, resumable=True,
                                random_order=True)
        right = base > 0.5
        cut = torch.quantile(margin[right], MARGIN_SHARE)
        uncertain = ~right | (margin <= cut)
        self.a, self.b = torch.nonzero(uncertain).flatten(), torch.nonzero(~uncertain).flatten()
        self.seen: dict[tuple, tuple[float, float]] = {}  # intervals, shared by the thresholds
        self.below: dict[int, torch.Tensor] = {}  # each point's neighbour a ratio step below

    def _first(self, looks: list[int], interval: Callable[[int], tuple[float, float]],
               decided: Callable[[tuple[float, float]], bool]) -> int:
        for n in looks:
            if decided(interval(n)):
                return n
        return self.total

    def _kept(self, key: tuple, interval: Callable[[], tuple[float, float]]
              ) -> tuple[float, float]:
        """``interval()``, computed once per ``key`` (a point's interval at a look does not
        depend on the threshold it is decided against)."""
        if key not in self.seen:
            self.seen[key] = interval()
        return self.seen[key]

    def _paired(self, scores: torch.Tensor, n: int, alpha: float,
                reference: torch.Tensor | None = None) -> tuple[float, float]:
        """The loss interval after ``n`` images, the flips counted against ``reference``'s
        per-image scores (a point known on every image; by default the unpruned model's)."""
        reference = self.base if reference is None else reference

        def interval() -> tuple[float, float]:
            counts = PairedCounts()
            counts.add(scores[:n], reference[:n])
            low, high = mean_interval(counts, reference, bound="confidence", alpha=alpha,
                                      binary=True)
            return self.meter.loss_interval(low, high)
        return self._kept((id(scores), n, alpha, id(reference)), interval)

    def against(self, scores: torch.Tensor, reference: torch.Tensor, t: float) -> int:
        """As :meth:`now`, paired with ``reference`` instead of the unpruned model: the loss
        interval is the reference's exact loss plus the bound on the net flips between the
        two."""
        return self._first(self.meter.looks,
                           lambda n: self._paired(scores, n, self.meter.alpha, reference),
                           lambda iv: not iv[0] <= t < iv[1])

    def now(self, scores: torch.Tensor, t: float, zone: float = 0.0) -> int:
        """As :class:`PointMeter` decides (``zone``: also within ``t * (1 +- zone)``)."""
        def decided(iv: tuple[float, float]) -> bool:
            return not iv[0] <= t < iv[1] or (zone > 0 and t * (1 - zone) <= iv[0] and
                                              iv[1] <= t * (1 + zone))
        return self._first(self.meter.looks, lambda n: self._paired(scores, n, self.meter.alpha),
                           decided)

    def spent(self, scores: torch.Tensor, t: float, growth: float) -> int:
        """The bound's error spent on looks ``growth`` apart in proportion to their images."""
        looks = look_points(self.total, growth=growth)
        share = {n: (1 - self.confidence) / 4 * n / sum(looks) for n in looks}
        return self._first(looks, lambda n: self._paired(scores, n, share[n]),
                           lambda iv: not iv[0] <= t < iv[1])

    def strata(self, scores: torch.Tensor, t: float, uncertain_first: bool) -> int:
        """Stratum A then B (or both in proportion), bounded apart and summed."""
        a, b = self.a, self.b
        base_a, scores_a, scores_b = self.base[a], scores[a], scores[b]
        na_total, nb_total = len(a), len(b)
        alpha = self.meter.alpha / 2

        def interval(n: int) -> tuple[float, float]:
            share = 1.0 if uncertain_first else na_total / self.total
            na = min(na_total, max(n - nb_total, math.ceil(n * share)))
            nb = n - na
            if na >= na_total:
                a_low = a_high = float(scores_a.sum())
            else:
                counts = PairedCounts()
                counts.add(scores_a[:na], base_a[:na])
                low, high = mean_interval(counts, base_a, bound="confidence", alpha=alpha,
                                          binary=True)
                a_low, a_high = low * na_total, high * na_total
            if nb >= nb_total:
                d_low = d_high = int((scores_b < 0.5).sum())
            elif nb == 0:
                d_low, d_high = 0, nb_total
            else:
                d_low, d_high = successes_interval(int((scores_b[:nb] < 0.5).sum()), nb,
                                                   nb_total, alpha)
            low, high = a_low + nb_total - d_high, a_high + nb_total - d_low
            return self.meter.loss_interval(low / self.total, high / self.total)

        return self._first(self.meter.looks,
                           lambda n: self._kept((id(scores), n, "strata", uncertain_first),
                                                lambda: interval(n)),
                           lambda iv: not iv[0] <= t < iv[1])


def neighbours(points: list[torch.Tensor], grid: int) -> dict[int, torch.Tensor] | None:
    """Each point's neighbour one ratio step below (by ``id``; the first ratio of a group has
    none): the kept scores hold each group's ``grid`` ratios in a row, as the full analysis
    measured them. None when they do not (another count of points)."""
    if not points or len(points) % grid:
        return None
    return {id(p): points[i - 1] for i, p in enumerate(points) if i % grid}


VARIANTS: dict[str, Callable[[Levers, torch.Tensor, float], int]] = {
    "now": lambda lv, s, t: lv.now(s, t),
    "zone +-25 %": lambda lv, s, t: lv.now(s, t, zone=0.25),
    "zone +-50 %": lambda lv, s, t: lv.now(s, t, zone=0.5),
    "alpha by images": lambda lv, s, t: lv.spent(s, t, growth=1.5),
    "looks x1.25": lambda lv, s, t: lv.spent(s, t, growth=1.25),
    "margin strata, uncertain first": lambda lv, s, t: lv.strata(s, t, uncertain_first=True),
    "margin strata, proportional": lambda lv, s, t: lv.strata(s, t, uncertain_first=False),
    "neighbour as reference": lambda lv, s, t: lv.against(s, lv.below[id(s)], t)
    if id(s) in lv.below else lv.now(s, t),
}


def concentration(base: torch.Tensor, margin: torch.Tensor, points: list[torch.Tensor]
                  ) -> list[dict[str, Any]]:
    """Per band of loss: how many points, their flips, and the share of those flips among the
    unpruned model's lowest-margin 10 / 20 / 50 % of images."""
    order, n, rows = margin.argsort(), len(base), []
    bands = ((0.0, 0.01), (0.01, 0.03), (0.03, 0.08), (0.08, 0.2), (0.2, math.inf))
    for low, high in bands:
        picked = [(s != base)[order].double() for s in points
                  if low <= (base.sum() - s.sum()) / base.sum() < high and (s != base).sum() > 0]
        if not picked:
            continue
        shares = [[float(f[:max(1, int(n * q))].sum() / f.sum()) for q in (0.1, 0.2, 0.5)]
                  for f in picked]
        rows.append({"band": f"[{low:g}, {high:g})", "points": len(picked),
                     "flips": sum(float(f.sum()) for f in picked) / len(picked),
                     "shares": [sum(col) / len(col) for col in zip(*shares)]})
    return rows


def levers(name: str, a: argparse.Namespace) -> list[dict[str, Any]]:
    """Every threshold's images per variant over every point of ``name``'s kept table."""
    work = Path(a.replay) / name
    scores = torch.load(work / "scores.pt", weights_only=True)
    base, margin = base_scores_and_margins(name, a, work)
    key = [k for k, v in scores.items() if len(v) == len(base) and torch.equal(v, base)]
    if not key:
        raise SystemExit(f"{work / 'scores.pt'} holds no unpruned model's scores in this order: "
                         f"run adaptive_replay.py with the same settings first")
    points = [v for k, v in scores.items() if k != key[0]]
    lv = Levers(base, margin, a.confidence)
    below = neighbours(points, len(replay.RATIOS))
    if below is None:
        raise SystemExit(f"{work / 'scores.pt'} holds {len(points)} pruned points, not "
                         f"{len(replay.RATIOS)} a group: run adaptive_replay.py first")
    lv.below = below
    print(f"\n{name}: {len(points)} points, {len(base):,} images, stratum A "
          f"{len(lv.a):,} images; flips by the unpruned model's margin:")
    print("| loss band | points | flips a point | share in lowest 10 % / 20 % / 50 % margins |")
    print("|---|---:|---:|---:|")
    for row in concentration(base, margin, points):
        print(f"| {row['band']} | {row['points']} | {row['flips']:.0f} | "
              + " / ".join(f"{v:.2f}" for v in row["shares"]) + " |")
    out = []
    if a.points:
        for file in a.points.split(","):
            t, measured = analysis_points(work, file, points, float(base.mean()))
            images = {v: sum(fn(lv, s, t) for s in measured) for v, fn in VARIANTS.items()}
            out.append({"model": name, "threshold": t, "images": images, "points": file})
        return out
    for t in [float(x) for x in a.thresholds.split(",")]:
        images = {v: sum(fn(lv, s, t) for s in points) for v, fn in VARIANTS.items()}
        out.append({"model": name, "threshold": t, "images": images})
    return out


def analysis_points(work: Path, file: str, points: list[torch.Tensor], baseline: float
                    ) -> tuple[float, list[torch.Tensor]]:
    """The final threshold of the adaptive analysis in ``work / file`` and the kept scores of
    every point it measured (the full table's groups in order, each its grid of ratios in a row:
    checked against the full table's losses)."""
    full = json.loads((work / "full.json").read_text())["sensitivities"]
    record = json.loads((work / file).read_text())
    grid = [f"{r:.2f}" for r in replay.RATIOS]
    groups = list(full)
    index = lambda g, r: groups.index(g) * len(grid) + grid.index(f"{float(r):.2f}")
    for g, table in full.items():
        for r, loss in table.items():
            mine = (baseline - float(points[index(g, r)].mean())) / baseline
            if abs(mine - loss) > 1e-9:
                raise SystemExit(f"{work / 'scores.pt'} does not hold {g} at {r} where "
                                 f"expected: run adaptive_replay.py again")
    thresholds = record["extra"]["adaptive"].get("thresholds") or \
        [float(v) for v in record["extra"]["adaptive"]["target"].values()]
    return float(thresholds[-1]), [points[index(g, r)] for g, table in
                                   record["sensitivities"].items() for r in table]


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    replay.replay_arguments(p)
    p.add_argument("--thresholds", default=",".join(map(str, THRESHOLDS)))
    p.add_argument("--confidence", type=float, default=0.999)
    p.add_argument("--points", default="",
                   help="adaptive-*.json files of each model's replay folder: only their points")
    a = replay.quick_settings(p.parse_args(argv))
    torch.set_num_threads(1)
    rows = [row for name in a.models.split(",") for row in levers(name, a)]
    print("\n| model | threshold | " + " | ".join(VARIANTS) + " |")
    print("|---|---:|" + "---:|" * len(VARIANTS))
    for r in rows:
        now = r["images"]["now"]
        label = f"{r['model']} ({r['points']})" if "points" in r else r["model"]
        print(f"| {label} | {r['threshold']:.4g} | " + " | ".join(
            f"{n:,}" + ("" if v == "now" else f" ({now / max(1, n):.2f}x)")
            for v, n in r["images"].items()) + " |")
    return rows


if __name__ == "__main__":
    main()
