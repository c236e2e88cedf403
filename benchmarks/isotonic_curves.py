"""FLOPs allocations read from a running maximum against an isotonic fit (issue 41): how far a
full and an adaptive table's allocations lie apart, how far the full table's two halves', and
what each allocation really loses.

A FLOPs target's allocation reads each group's loss curve made non-decreasing.
``autoprune.engine.allocate.loss_curve`` fits it by isotonic regression (least squares, clipped
at 0); before session 70 it was a running maximum from (0, 0), kept here as ``running_max`` for
the comparison. This script reads what ``adaptive_replay.py`` left in its ``--out`` folder (the
full table, the full table of each half of the images, the adaptive table of each FLOPs target,
and the kept per-image scores) and, per model and FLOPs target, under both readings:

- the largest per-group difference, in ratio steps, between the full and the adaptive table's
  allocations, and between the two halves' allocations;
- the top-1 each allocation really loses (absolute, no retraining): the full table's on every
  kept image, and the first half's on the second half's images (held out: what generalises);
  the pruned allocations' per-image scores are kept in ``<model>/allocation_scores.pt``.

    python benchmarks/adaptive_replay.py --models resnet18,mobilenetv3_large_100 ...   # first
    python benchmarks/isotonic_curves.py --replay runs/replay_iso
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its neighbour adaptive_replay
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import adaptive_replay as replay  # noqa: E402
import autoprune  # noqa: E402
import autoprune.engine.allocate as allocate  # noqa: E402
from autoprune.flow.sensitivities import TaskEval  # noqa: E402

cost = replay.cost


def running_max(points: Mapping[float, float]) -> list[tuple[float, float]]:
    """The reading before session 70: ``[(ratio, loss)]`` from (0, 0), each loss the largest
    measured at or below its ratio."""
    curve, worst = [(0.0, 0.0)], 0.0
    for r, v in sorted((float(r), float(v)) for r, v in points.items()):
        worst = max(worst, v)
        curve.append((r, worst))
    return curve


READINGS = {"running max": running_max, "isotonic": allocate.loss_curve}


@contextlib.contextmanager
def reading(curve) -> Iterator[None]:
    """The allocators read ``curve`` for the duration of the block."""
    before = allocate.loss_curve
    allocate.loss_curve = curve
    try:
        yield
    finally:
        allocate.loss_curve = before


def compare(name: str, a: argparse.Namespace) -> list[dict[str, Any]]:
    """Per FLOPs target of ``name``'s replay folder, both readings' figures."""
    work = Path(a.replay) / name
    adapter, model = replay.base_model(name, a, work)
    x, ignored = adapter.example_inputs(model), adapter.ignored_layers(model)
    # the unpruned model's kept scores; the pruned allocations' go to a file of their own
    # (scores.pt holds the full table's points only: bound_levers.py reads every one as a point)
    base = replay.ReplayEval(TaskEval(adapter), work / "scores.pt")._scores(model)
    scores = replay.ReplayEval(TaskEval(adapter), work / "allocation_scores.pt")
    n = len(base)
    read = lambda f: autoprune.read_record(work / f).sensitivities  # noqa: E731
    full, halves = read("full.json"), [read(f"full-half{k}.json") for k in (0, 1)]

    def allocation(table, value: float) -> dict[str, float]:
        return dict(autoprune.ratios_by_flops(model, x, table, value, ignored_layers=ignored))

    def lost(ratios: dict[str, float], images: slice) -> float:
        pruned = copy.deepcopy(model)
        autoprune.prune(pruned, x, ratios, ignored_layers=ignored)
        return float(base[images].mean() - scores._scores(pruned)[images].mean())

    rows = []
    for path in sorted(work.glob("adaptive-flops=*.json")):
        value = float(path.stem.split("=")[1])
        adaptive = read(path.name)
        row: dict[str, Any] = {"model": name, "target": f"flops={value:g}"}
        for label, curve in READINGS.items():
            with reading(curve):
                ours, theirs = allocation(adaptive, value), allocation(full, value)
                first, second = (allocation(t, value) for t in halves)
            row[label] = {"steps_apart": cost.steps_apart(theirs, ours),
                          "halves_apart": cost.steps_apart(first, second),
                          "lost_full": lost(theirs, slice(0, n)),
                          "lost_held_out": lost(first, slice(n // 2, n))}
        rows.append(row)
    if scores.computed:
        scores.save()  # the allocations' scores kept too: a rerun evaluates nothing
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    replay.replay_arguments(p)
    a = replay.quick_settings(p.parse_args(argv))
    torch.set_num_threads(1)
    rows = [row for name in a.models.split(",") for row in compare(name, a)]
    print("\n| model | target | " + " | ".join(
        f"{what}: running max / isotonic" for what in (
            "allocation vs full (steps)", "halves apart (steps)", "top-1 lost, full table's",
            "top-1 lost, half 0's on half 1")) + " |")
    print("|---|---|" + "---:|" * 4)
    for r in rows:
        cells = [" / ".join(f"{r[label][key]:.{digits}f}" for label in READINGS)
                 for key, digits in (("steps_apart", 2), ("halves_apart", 2), ("lost_full", 3),
                                     ("lost_held_out", 3))]
        print(f"| {r['model']} | {r['target']} | " + " | ".join(cells) + " |")
    worst = lambda label: max((r[label]["steps_apart"] for r in rows), default=0.0)  # noqa
    print(f"max_steps_running_max={worst('running max'):.2f} "
          f"max_steps_isotonic={worst('isotonic'):.2f}")
    return rows


if __name__ == "__main__":
    main()
