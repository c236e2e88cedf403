"""The adaptive analysis set up and run (:mod:`autoprune.engine.adaptive` says what it measures,
:mod:`autoprune.engine.adaptive_run` its rounds): the unpruned model's per-image scores and prefix
cache, the point runner and the meter, the cost said before the points, the progress bar."""
from __future__ import annotations

import time
from typing import Any, Mapping

import torch.nn as nn

from ..errors import ConfigError
from .adaptive import Target, Thresholds
from .adaptive_meter import PointMeter
from .adaptive_eta import predicted_shares
from .adaptive_run import AdaptiveRun
from .allocate import FlopsModel
from .cost import adaptive_shares, announce, wall
from .distributed import broadcast, rank_and_world, shard
from .fused_eval import pays_at
from .groups import PruningGraph
from .incremental import CountingEval
from .measure import flush_denormals
from .points import EvalFn, PointRunner, as_metric
from .prefix_check import prepare_cache, unpruned_scores
from .progress import progress_bar
from .store import SensitivityRecord, shard_path, write_record


def _run_adaptive(model: nn.Module, example_inputs: Any, eval_fn: CountingEval,
                  graph: PruningGraph, record: SensitivityRecord, names: list[str],
                  ratios: list[float], higher_is_better: bool, opts: Mapping[str, Any],
                  goal: Target, scores: tuple | None, criterion: str, path: Any, progress: bool
                  ) -> tuple[dict[str, Any] | None, SensitivityRecord]:
    """The adaptive analysis (:mod:`autoprune.engine.adaptive`) of ``names`` over the grid
    ``ratios`` into ``record``; returns this rank's evaluation counts (None when nothing was
    measured) and its own points."""
    baseline = float(record.metric["baseline"])
    rank, world = rank_and_world()
    own = SensitivityRecord(model=record.model, metric=record.metric, criterion=criterion,
                            extra=record.extra)
    target = path if rank == 0 else (shard_path(path, rank) if path is not None else None)
    write = (lambda: write_record(record if rank == 0 else own, target)) if target else \
        (lambda: None)
    desc = "sensitivity (adaptive)" + (f" [rank {rank}/{world}]" if world > 1 else "")
    bar = progress_bar(total=None, desc=desc, unit="img", enabled=False)
    seen = [eval_fn.images]

    def tick(name: str) -> None:
        bar.set_postfix_str(name)
        bar.update(eval_fn.images - seen[0])
        seen[0] = eval_fn.images
        if bar.total is not None and bar.n > bar.total:
            bar.total = int(bar.n * 1.25)

    bound = {"bound": opts["bound"], **({"confidence": opts["confidence"]}
                                        if opts["bound"] == "confidence" else {})}
    run = AdaptiveRun(model, Thresholds(goal, lambda: FlopsModel(graph, example_inputs)), bound,
                      record=record, own=own, names=names, grid=ratios, write=write, tick=tick)
    if run.done() and not opts["plan"]:
        return (eval_fn.counts() if eval_fn.calls or eval_fn.images else None), own
    flush_denormals()
    mine = shard(names, rank, world)
    base, cache, total, replayed = None, None, eval_fn.per_call, None
    if eval_fn.incremental is not None:
        base, _, cache, replayed = scores or unpruned_scores(model, eval_fn, graph, mine,
                                                             opts["prefix_cache"])
        total = len(base) if base is not None else total
        if not total:
            raise ConfigError("an incremental evaluation of a metric that is not a mean of "
                              "per-image scores must say how many images it covers (images)")
    elif opts["prefix_cache"] and mine:
        cache, _ = prepare_cache(model, eval_fn, graph, [(n, 0.0) for n in mine], baseline)
    run.runner = PointRunner(model, eval_fn, graph, criterion, cache, "prune", 1, 0, False, "",
                             opts["fused_eval"] and pays_at(example_inputs), baseline)
    run.runner.base_scores = base  # the folded evaluation is checked on the first of them
    if eval_fn.incremental is not None:
        run.meter = PointMeter(eval_fn, base, total, baseline, higher_is_better,
                               bound=opts["bound"], confidence=opts["confidence"],
                               resumable=eval_fn.resumable, random_order=eval_fn.random_order)
    else:
        run.meter = WholeMeter(eval_fn, run.runner, baseline, higher_is_better)
    todo = [(n, r) for n in names for r in ratios
            if not record.has_point(n, r) or record.is_interval(n, r)]
    cost = None
    if todo and not opts["plan"]:
        run.runner.prepare_fused()  # so that the estimate times the points' folded evaluation
    if (progress or opts["plan"]) and rank == 0 and todo:
        groups = sorted({n for n, _ in todo})
        shares = predicted_shares(run.meter, run.runner, model, groups, run.planner,
                                  run.thresholds, len(todo), {n: run.known(n) for n in groups})
        shares = shares or adaptive_shares(goal.kind, run.meter.bound, len(ratios), total)
        run.pilots = shares.pop("pilots", {})  # their images are handed on, not evaluated again
        cost = announce(model, example_inputs, eval_fn, graph, run.runner, todo, None,
                         adaptive={"target": goal.describe(), "bound": run.meter.bound,
                                   **shares}, images=total, replayed=replayed)
        bar = progress_bar(total=cost.expected_images, desc=desc, unit="img",
                           enabled=progress and not opts["plan"])
    if opts["plan"]:
        return None, own
    if world > 1 and todo:  # rank 0's pilots, so a rank measuring a piloted point continues it
        shared = broadcast({k: p for k, p in run.pilots.items()  # not an evaluation's state:
                            if getattr(p, "state", None) is None} if rank == 0 else None)
        run.pilots = run.pilots if rank == 0 else shared  # on rank 0's device (mIoU's matrix)
    start = time.perf_counter()
    run.run()
    bar.close()
    # decided_early counts measurements stopped early (summed over sessions: a point stopped,
    # then refined for another threshold, counts twice); points_as_intervals is the table's
    intervals = sum(len(points) for name, points in record.intervals.items() if name in names)
    summary = {**run.runner.summary(), "mode": "adaptive", **eval_fn.counts(),
               "decided_early": run.decided_early, "points_as_intervals": intervals,
               **wall(cost, start)}
    return summary, own


class WholeMeter:
    """A point's metric from one whole ``eval_fn`` call (an evaluation that cannot report as it
    goes: only the choice of points is adaptive)."""

    bound = "none"
    confidence = None

    def __init__(self, eval_fn: EvalFn, runner: PointRunner, baseline: float,
                 higher_is_better: bool):
        self.eval_fn, self.runner = eval_fn, runner
        self.baseline, self.higher_is_better = baseline, higher_is_better

    def measure(self, model: nn.Module, thresholds: list[float], before: Any = None,
                where: tuple[str, float] = ("?", 0.0)) -> dict[str, Any]:
        metric = as_metric(self.eval_fn(model), f"for group {where[0]} at ratio "
                                                f"{where[1]:.2f}", finite=False)
        return {"loss": self.runner._loss(where[0], where[1], self.baseline, metric,
                                          self.higher_is_better)}
