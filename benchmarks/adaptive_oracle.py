"""Where a FLOPs target's images go (issue 41): the adaptive analysis replayed as it runs, again
with its final threshold known from the start, and a reference that measures only what the
allocation reads at that threshold.

A FLOPs target's allocation reads each group's curve at one common loss threshold, which the
analysis estimates round after round from what it has measured. This script reads what
``adaptive_replay.py`` kept (each point's per-image top-1, ``<replay>/<model>/scores.pt``, and the
full table) and counts, per FLOPs target, the images of

- ``as run``: the adaptive analysis as it is (coarse pass, estimated thresholds, probes);
- ``threshold known``: the same analysis with every estimate replaced by the threshold the full
  table's allocation has (what the moving estimate costs);
- ``bracket only``: per group only the two grid points around that threshold on the full
  table's fitted curve (the last within it, the next one), each decided against it by the
  analysis's bound (:class:`~autoprune.engine.adaptive_meter.PointMeter`): no coarse pass, no
  probe that misses. A reference, not a floor: the analysis may leave a flat bracket's middle
  point unmeasured, and a point's images depend on how near the threshold its loss lies.

    python benchmarks/adaptive_replay.py --models resnet18 --size 32 --val-images 2000 \\
        --train-images 20000 --base-epochs 8 --groups 12 --targets flops=0.5 --out runs/t2k
    python benchmarks/adaptive_oracle.py --replay runs/t2k --models resnet18 --size 32 \\
        --val-images 2000 --train-images 20000 --base-epochs 8 \\
        --targets flops=0.3,flops=0.5,flops=0.7
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any, Iterator

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its neighbour adaptive_replay
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import adaptive_replay as replay  # noqa: E402
from autoprune.engine import adaptive  # noqa: E402
from autoprune.engine.adaptive_meter import PointMeter  # noqa: E402
from autoprune.engine.allocate import FlopsModel, ignored_names, threshold_curve  # noqa: E402
from autoprune.engine.fast_copy import fast_deepcopy  # noqa: E402
from autoprune.engine.groups import PruningGraph  # noqa: E402
from autoprune.engine.prune import remove_channels  # noqa: E402
from autoprune.flow.sensitivities import TaskEval  # noqa: E402


@contextlib.contextmanager
def known_threshold(t: float) -> Iterator[None]:
    """Every estimate of a FLOPs target's threshold answers ``t`` while inside."""
    real = adaptive.Thresholds.estimate
    adaptive.Thresholds.estimate = lambda self, table, top: \
        real(self, table, top) if self.target.kind == "loss" else [t]
    try:
        yield
    finally:
        adaptive.Thresholds.estimate = real


def bracket(points: dict[float, float], t: float) -> list[float]:
    """The grid points around ``t`` on the fitted curve the allocation reads: the last within
    it and the next one (one of them where the curve lies wholly within or over it)."""
    curve = threshold_curve(points)
    within = [r for r in sorted(curve) if curve[r] <= t]
    above = [r for r in sorted(curve) if r > (within[-1] if within else 0.0)]
    return ([within[-1]] if within else []) + above[:1]


class Oracle:
    """One model of a replay folder: its full table, kept scores and the bound's meter."""

    def __init__(self, name: str, a: argparse.Namespace):
        self.work = Path(a.replay) / name
        if not (self.work / "full.json").is_file():
            raise SystemExit(f"{self.work / 'full.json'} is missing: run adaptive_replay.py "
                             f"with the same settings and --out {a.replay} first")
        self.name = name
        self.adapter, self.model = replay.base_model(name, a, self.work)
        kept = json.loads((self.work / "full.json").read_text())
        self.groups = [g for g in replay.cost.groups_of(self.model, self.adapter, 0)
                       if g in kept["sensitivities"]]  # the groups the replay measured
        self.evaluate = replay.ReplayEval(TaskEval(self.adapter), self.work / "scores.pt")
        self.full = {g: {float(r): v for r, v in kept["sensitivities"][g].items()}
                     for g in self.groups}
        self.full_images = int(kept["extra"]["evaluation"]["images_evaluated"])
        self.example = self.adapter.example_inputs(self.model)
        self.ignored = self.adapter.ignored_layers(self.model)
        self.flops = FlopsModel(PruningGraph(self.model, self.example, self.ignored),
                                self.example)
        base = self.evaluate._scores(self.model)
        self.meter = PointMeter(self.evaluate, base, len(base), float(base.mean()), True,
                                bound="confidence", confidence=a.confidence or 0.999,
                                resumable=True, random_order=True)

    def point_images(self, group: str, ratio: float, t: float) -> int:
        """The images the bound needs to decide ``group`` at ``ratio`` against ``t`` alone."""
        pruned = fast_deepcopy(self.model)
        remove_channels(pruned, self.example, {group: ratio},
                        ignored_layers=ignored_names(self.model, self.ignored))
        if self.evaluate.key(pruned) not in self.evaluate.scores:
            raise SystemExit(f"{self.work / 'scores.pt'} holds no scores of {group} at {ratio}: "
                             f"run adaptive_replay.py with the same settings first")
        return int(self.meter.measure(pruned, [t]).get("images", self.meter.total))

    def analysis_images(self, target: str, label: str) -> tuple[int, list[float]]:
        """The images of an adaptive analysis of ``target`` and its final thresholds."""
        _, record, _ = replay.analyze(self.adapter, self.model, self.evaluate, self.groups,
                                      self.work / f"oracle-{target}-{label}.json",
                                      adaptive=True, target=target)
        return (int(record.extra["evaluation"]["images_evaluated"]),
                list(record.extra["adaptive"].get("thresholds", [])))

    def row(self, target: str) -> dict[str, Any]:
        """The three counts of one FLOPs target."""
        goal = float(target.split("=")[1])
        t = adaptive.threshold_for(self.flops, self.full, goal)
        as_run, reached = self.analysis_images(target, "as-run")
        with known_threshold(t):
            known, used = self.analysis_images(target, "threshold-known")
        points = {(g, r) for g in self.groups for r in bracket(self.full[g], t)}
        return {"model": self.name, "target": target, "threshold": t, "estimated": reached,
                "threshold_used": used, "full": self.full_images, "as_run": as_run,
                "known": known, "points": len(points),
                "bracket": sum(self.point_images(g, r, t) for g, r in sorted(points))}


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    replay.replay_arguments(p)
    p.add_argument("--targets", default="flops=0.3,flops=0.5,flops=0.7")
    p.add_argument("--confidence", type=float, default=0.0,
                   help="the confidence bound's level (0: the analysis's default)")
    a = replay.quick_settings(p.parse_args(argv))
    if any(not t.startswith("flops=") for t in a.targets.split(",")):
        raise SystemExit(f"--targets {a.targets}: FLOPs targets only, e.g. flops=0.5")
    torch.set_num_threads(1)
    rows = []
    for name in a.models.split(","):
        oracle = Oracle(name, a)
        rows += [oracle.row(t) for t in a.targets.split(",")]
    print("\n| model | target | threshold: full table's (the analysis's) | images full | as run | "
          "threshold known | bracket only (points) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        x = lambda n: f"{n:,} ({r['full'] / max(1, n):.2f}x)"
        print(f"| {r['model']} | {r['target']} | {r['threshold']:.4f} ("
              + ", ".join(f"{v:.4f}" for v in r["estimated"]) + f") | {r['full']:,} | "
              f"{x(r['as_run'])} | {x(r['known'])} | {x(r['bracket'])} ({r['points']}) |")
    return rows


if __name__ == "__main__":
    main()
